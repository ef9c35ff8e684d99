"""Processes the embedded cluster started and left running, found again by their pid files."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Running, not a zombie: an exited child stays one until the process that started it reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def pid_in(pid_file: Path) -> int | None:
    """The pid a pid file names when that process runs; None when the file is missing, empty or stale."""
    content = pid_file.read_text().strip() if pid_file.exists() else ""
    return int(content) if content.isdigit() and alive(int(content)) else None


def terminate(pid_file: Path, timeout: float) -> None:
    """SIGTERM to the process a pid file names, if it runs; SIGKILL when it is still alive after `timeout` s."""
    pid = pid_in(pid_file)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
