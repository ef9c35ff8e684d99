"""The dev system's ports, as the host sees them: which are taken before `make dev` starts, and by whom; which of
this checkout's services still hold them after a `make dev` was killed."""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path


def listening_pids(port: int) -> list[int]:
    """The processes with a TCP socket listening on `port` (any address), as far as this user can see them."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    pids = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pids.append(int(fd_dir.parent.name))
        except OSError:  # gone, or another user's
            continue
    return sorted(pids)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services bind: TIME_WAIT is no owner
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def busy_ports(ports: dict[int, str]) -> list[str]:
    """One line for every port (port -> what needs it) that something else already listens on, naming it."""
    lines = []
    for port, purpose in sorted(ports.items()):
        if not port_in_use(port):
            continue
        holders = [f"pid {pid} ({_command_line(pid)[:100]})" for pid in listening_pids(port)]
        held = ", ".join(holders) or f"a process this user cannot see (`sudo ss -ltnp 'sport = :{port}'` names it)"
        lines.append(f"port {port} ({purpose}) is in use by {held}")
    return lines


def left_behind(ports: dict[int, str]) -> dict[int, str]:
    """This checkout's services still listening on the dev system's ports after the `make dev` that started them
    was killed (its services outlive it): pid -> command line."""
    ours = f"{sys.executable} -m tollgate."
    pids = {pid for port in ports for pid in listening_pids(port)}
    return {pid: line for pid in sorted(pids) if (line := _command_line(pid)).startswith(ours)}
