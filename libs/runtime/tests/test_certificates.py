"""ServingCertificate: a renewed certificate is served without a restart, over HTTPS (an ssl context) and gRPC,
and a broken pair on disk leaves the last good one serving."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tollgate.runtime.certificates import CERT_FILE, KEY_FILE, ServingCertificate
from tollgate.runtime.http_server import HTTPServer
from tollgate.testing.agents import certificates
from tollgate.testing.wait import eventually


@pytest.fixture
def authorities(tmp_path: Path) -> tuple[Path, Path]:
    """The CA files of two serving pairs for 127.0.0.1, the first one installed in tmp_path / "served"."""
    first, second = certificates(tmp_path / "first"), certificates(tmp_path / "second")
    install(first.parent, tmp_path / "served")
    return first, second


def install(source: Path, served: Path) -> None:
    """Renew the served pair, as the kubelet does with a Secret's files."""
    served.mkdir(exist_ok=True)
    for name in (CERT_FILE, KEY_FILE):
        shutil.copyfile(source / name, served / name)


async def handshake(port: int, ca_file: Path) -> bool:
    """Whether a new TLS connection to 127.0.0.1:port trusting only `ca_file` succeeds."""
    trusting = ssl.create_default_context(cafile=str(ca_file))
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting)
    except ssl.SSLCertVerificationError:
        return False
    writer.close()
    return True


@pytest.fixture
async def https(tmp_path: Path, authorities: tuple[Path, Path]) -> AsyncIterator[tuple[ServingCertificate, int]]:
    served = ServingCertificate(tmp_path / "served")
    server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0, ssl=served.ssl_context())
    async with server:
        yield served, server.sockets[0].getsockname()[1]


async def test_a_renewed_certificate_is_served_over_https_without_a_restart(
    tmp_path: Path, authorities: tuple[Path, Path], https: tuple[ServingCertificate, int]
) -> None:
    served, port = https
    first, second = authorities
    assert await handshake(port, first) and not await handshake(port, second)
    install(second.parent, tmp_path / "served")
    assert served.reload()
    assert await handshake(port, second), "new connections get the renewed pair"
    assert not await handshake(port, first), "the old pair is gone"


async def test_a_broken_pair_on_disk_leaves_the_last_good_one_serving(
    tmp_path: Path, authorities: tuple[Path, Path], https: tuple[ServingCertificate, int]
) -> None:
    served, port = https
    first, second = authorities
    shutil.copyfile(second.parent / CERT_FILE, tmp_path / "served" / CERT_FILE)  # half renewed: the old key
    assert not served.reload()
    assert await handshake(port, first)
    (tmp_path / "served" / KEY_FILE).unlink()
    assert not served.reload()
    assert await handshake(port, first)


def test_a_directory_without_a_pair_is_refused_naming_the_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"tls\.crt and .*tls\.key"):
        ServingCertificate(tmp_path)


async def grpc_connects(port: int, ca_file: Path) -> bool:
    """Whether a new gRPC channel to 127.0.0.1:port trusting only `ca_file` completes its TLS handshake."""
    credentials = grpc.ssl_channel_credentials(root_certificates=await asyncio.to_thread(ca_file.read_bytes))
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout=3)
        except TimeoutError:
            return False
    return True


async def test_a_renewed_certificate_is_served_over_grpc_without_a_restart(
    tmp_path: Path, authorities: tuple[Path, Path]
) -> None:
    first, second = authorities
    server = grpc.aio.server()
    port = server.add_secure_port("127.0.0.1:0", ServingCertificate(tmp_path / "served").grpc_credentials())
    await server.start()
    try:
        assert await grpc_connects(port, first) and not await grpc_connects(port, second)
        install(second.parent, tmp_path / "served")  # gRPC reloads before the next handshake
        assert await grpc_connects(port, second), "new connections get the renewed pair"
        assert not await grpc_connects(port, first), "the old pair is gone"
    finally:
        await server.stop(None)


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def test_the_http_server_serves_a_renewed_certificate_without_a_restart(
    tmp_path: Path, authorities: tuple[Path, Path]
) -> None:
    """tollgate.runtime.http_server, which the webhook and the xds debug API serve through, polls its files."""
    first, second = authorities
    server = HTTPServer(_answer, "127.0.0.1", 0, ServingCertificate(tmp_path / "served"), reload_seconds=0.05)
    serving = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: handshake(server.port, first), "the first pair served")
        install(second.parent, tmp_path / "served")

        async def renewed() -> bool:
            return await handshake(server.port, second) and not await handshake(server.port, first)

        await eventually(renewed, "the renewed pair served, and only it", timeout=10)
    finally:
        server.stop()
        await serving
