"""Addresses for servers that tests start on this machine."""

from __future__ import annotations

import contextlib
import socket


def free_port(host: str = "127.0.0.1", *, udp: bool = False) -> int:
    """A port that was free on `host` a moment ago (bind to port 0, read it back, close)."""
    return free_ports(1, host, udp=udp)[0]


def free_ports(count: int, host: str = "127.0.0.1", *, udp: bool = False) -> list[int]:
    """`count` distinct ports that were free on `host` a moment ago. Picked one at a time, two picks may return the
    same port (the kernel chooses at random in its ephemeral range, and a closed socket frees its port at once): one
    kwokctl cluster got the same port for etcd's peers and the controller-manager, which then never started. Every
    socket stays bound until all are picked, so the kernel cannot hand out one port twice."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
