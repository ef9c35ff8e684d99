"""Addresses for servers that tests start on this machine."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1", *, udp: bool = False) -> int:
    """A port that was free on `host` a moment ago (bind to port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
