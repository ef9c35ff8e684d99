"""Run Tilt against the repository's Tiltfile, as a user would: `tilt ci` and `tilt alpha tiltfile-result`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tollgate.testing.net import free_port
from tollgate.testing.tools import ToolsMissingError, repo_root, tool


def tilt_binary() -> Path:
    """The `tilt` that `make tools` linked or built; ToolsMissingError says how to get one."""
    try:
        return tool("tilt")
    except ToolsMissingError as error:
        raise ToolsMissingError(
            f"{error}; it is built from ../shared/vendor/tilt (TILT_SOURCE_ARCHIVE) or taken from PATH"
        ) from error


def tilt_env(dev_dir: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """Tilt's environment: its own state (~/.tilt-dev) under `dev_dir`, the dev system's state in `dev_dir`."""
    env = {
        **os.environ,
        "TOLLGATE_DEV_DIR": str(dev_dir),
        "TILT_DEV_DIR": str(dev_dir / "tilt-dev"),
        "TILT_DISABLE_ANALYTICS": "1",
        "PATH": f"{tilt_binary().parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("KUBECONFIG", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def tilt_ci(
    dev_dir: Path, *tiltfile_args: str, kubeconfig: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`tilt ci -- <tiltfile_args>` in the checkout; the output is kept in dev_dir/tilt-ci.log as well."""
    command = [str(tilt_binary()), "ci", "--port", str(free_port()), "--timeout", f"{int(timeout)}s"]
    if tiltfile_args:
        command += ["--", *tiltfile_args]
    dev_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        command,
        cwd=repo_root(),
        env=tilt_env(dev_dir, kubeconfig),
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    (dev_dir / "tilt-ci.log").write_text(result.stdout + result.stderr)
    return result


def tiltfile_result(dev_dir: Path, *tiltfile_args: str) -> dict[str, Any]:
    """`tilt alpha tiltfile-result`: the Tiltfile evaluated without a cluster, every resource it declares."""
    command = [str(tilt_binary()), "alpha", "tiltfile-result"]
    if tiltfile_args:
        command += ["--", *tiltfile_args]
    result = subprocess.run(
        command, cwd=repo_root(), env=tilt_env(dev_dir), capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"tilt alpha tiltfile-result failed ({result.returncode}):\n{result.stderr[-4000:]}")
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed
