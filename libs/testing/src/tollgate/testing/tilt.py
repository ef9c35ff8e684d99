"""Run Tilt against the repository's Tiltfile, as a user would: `tilt ci` and `tilt alpha tiltfile-result`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
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


def copy_checkout(destination: Path) -> Path:
    """The files git sees in this checkout (tracked, and untracked but not ignored) copied to `destination`, with
    the checkout's .venv linked: a checkout a test may edit while Tilt watches it."""
    root = repo_root()
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    )
    for name in filter(None, listing.stdout.decode().split("\0")):
        source = root / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    (destination / ".venv").symlink_to(root / ".venv")
    return destination


class TiltUp:
    """`tilt up -- <tiltfile_args>` in `checkout`, in the background, on a port of its own; `wait` for a resource."""

    def __init__(self, dev_dir: Path, checkout: Path, *tiltfile_args: str, kubeconfig: Path) -> None:
        self.env = tilt_env(dev_dir, kubeconfig)
        self.checkout = checkout
        self.port = free_port()
        dev_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = dev_dir / "tilt-up.log"
        command = [str(tilt_binary()), "up", "--port", str(self.port), "--stream", "--", *tiltfile_args]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=checkout, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def wait(self, resource: str, timeout: float) -> None:
        """`tilt wait` for the resource, asked again while Tilt's API server is still starting."""
        deadline = time.monotonic() + timeout
        command = [str(tilt_binary()), "wait", "--port", str(self.port), "--for=condition=Ready"]
        while True:
            left = max(int(deadline - time.monotonic()), 1)
            result = subprocess.run(
                [*command, f"uiresource/{resource}", f"--timeout={left}s"],
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode == 0:
                return
            starting = "No tilt apiserver found" in result.stderr or "not found" in result.stderr
            if not starting or self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{resource} not Ready: {result.stderr.strip()}\n{self.logs()[-6000:]}")
            time.sleep(0.5)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


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
