"""Build a benchmark's Go program (a directory under bench/) once into the tools cache.

The binary is kept under the tools cache (`tollgate.testing.tools.tools_bin`, beside the control-plane
binaries) in a file named after a hash of the program's sources, go.mod and go.sum, so an edit builds it
again and an unchanged program is not rebuilt. Modules come through the Go module proxy configured for
`go` (`GOFLAGS=-mod=mod`: go.sum is checked, go.mod may gain what the build needs).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tollgate.testing.tools import repo_root, tools_bin


def build(program: str) -> Path:
    """The binary of bench/<program>, built if its sources changed since the last build."""
    go = shutil.which("go")
    if go is None:
        raise SystemExit(f"bench/{program} is a Go program and Go is not on PATH")
    source = repo_root() / "bench" / program
    digest = hashlib.sha256()
    for path in sorted(source.iterdir()):
        if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    binary = tools_bin().parent / "bench" / f"{program}-{digest.hexdigest()[:16]}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        target = "." if (source / "go.mod").exists() else "main.go"
        env = {**os.environ, "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=mod".strip()}
        subprocess.run([go, "build", "-o", str(partial), target], cwd=source, env=env, check=True)
        partial.rename(binary)
    return binary
