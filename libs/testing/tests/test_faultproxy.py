"""The fault proxy against a real TCP echo server: each mode does to a live connection what it says."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tollgate.testing.faultproxy import FaultProxy, Mode


class _Echo(socketserver.BaseRequestHandler):
    received: list[bytes] = []

    def handle(self) -> None:
        while data := self.request.recv(1024):
            _Echo.received.append(data)
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    _Echo.received = []
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address  # type: ignore[misc]
    server.shutdown()
    server.server_close()


def _connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=5)
    sock.settimeout(0.5)
    return sock


def test_pass_forwards_both_ways(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy, _connect(proxy) as sock:
        sock.sendall(b"hello")
        assert sock.recv(1024) == b"hello"


def test_drop_responses_delivers_the_request_and_loses_the_answer(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy, _connect(proxy) as sock:
        proxy.set_mode(Mode.DROP_RESPONSES)
        sock.sendall(b"write")
        with pytest.raises(TimeoutError):
            sock.recv(1024)
        assert _Echo.received == [b"write"], "the server got the request"
        proxy.set_mode(Mode.PASS)
        sock.sendall(b"again")
        assert sock.recv(1024) == b"again", "only the answers given while dropping are lost"


def test_freeze_holds_bytes_until_thawed(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy, _connect(proxy) as sock:
        proxy.set_mode(Mode.FREEZE)
        sock.sendall(b"held")
        with pytest.raises(TimeoutError):
            sock.recv(1024)
        assert _Echo.received == [], "nothing reached the server while frozen"
        proxy.set_mode(Mode.PASS)
        sock.settimeout(5)
        assert sock.recv(1024) == b"held"


def test_refuse_cuts_open_connections_and_new_ones(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy, _connect(proxy) as sock:
        proxy.set_mode(Mode.REFUSE)
        sock.settimeout(5)
        assert sock.recv(1024) == b"", "the open connection is closed"
        with _connect(proxy) as fresh:
            fresh.settimeout(5)
            assert fresh.recv(1024) == b""


def test_freeze_open_holds_the_open_connection_and_lets_a_new_one_through(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy, _connect(proxy) as old:
        old.sendall(b"open")
        assert old.recv(1024) == b"open", "the proxy has the connection"
        proxy.set_mode(Mode.FREEZE_OPEN)
        old.sendall(b"held")
        with pytest.raises(TimeoutError):
            old.recv(1024)
        with _connect(proxy) as fresh:
            fresh.settimeout(5)
            fresh.sendall(b"fresh")
            assert fresh.recv(1024) == b"fresh", "a new connection passes"
        with pytest.raises(TimeoutError):
            old.recv(1024)
        assert _Echo.received == [b"open", b"fresh"], "nothing more of the old connection reached the server"
        proxy.set_mode(Mode.PASS)
        old.settimeout(5)
        assert old.recv(1024) == b"held"
