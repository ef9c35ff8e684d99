"""The gRPC layer on its own: TLS, bearer-token authentication, and status codes for input refused before any
API call (the end-to-end tests cover the rest against a cluster)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from ipaddress import IPv4Address
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from opentelemetry import trace

from tollgate.allocator.__main__ import Settings, credentials
from tollgate.allocator.grpc import server
from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.allocator.k8s import Kube
from tollgate.allocator.registry import Registry
from tollgate.allocator.tunnels import EpicSingleton, Metrics, SeedTunnelIDs
from tollgate.models.epic import EPICSpec, GUEEndpoint

TOKEN = "s3cret"


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[int, bytes]]:
    cert, key = self_signed(tmp_path)
    settings = Settings(grpc_tls_cert=cert, grpc_tls_key=key)
    kube = Kube(client.ApiClient(client.Configuration(host="https://127.0.0.1:1")))  # never reached
    epic = EpicSingleton(kube, EPICSpec())
    registry = Registry(kube, SeedTunnelIDs(epic, Metrics()), epic, GUEEndpoint(epic_address=IPv4Address("10.0.0.1")))
    tracer = trace.get_tracer("test")
    grpc_server_, port = await server.start(registry, server.Token(TOKEN), tracer, "127.0.0.1:0", credentials(settings))
    yield port, cert.read_bytes()
    await grpc_server_.stop(grace=None)


def secure(port: int, root: bytes, token: str) -> AllocatorClient:
    channel_credentials = grpc.ssl_channel_credentials(root_certificates=root)
    return AllocatorClient(f"localhost:{port}", token, channel_credentials)


async def test_tls_and_a_bearer_token_guard_every_call(tls_server: tuple[int, bytes]) -> None:
    port, root = tls_server
    async with secure(port, root, "wrong") as intruder:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await intruder.tunnels()
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert raised.value.details() == "authorization: a valid bearer token is required"
    async with AllocatorClient(f"localhost:{port}", TOKEN) as plaintext:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await plaintext.tunnels(timeout=2)
    refused = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
    assert raised.value.code() in refused, "the TLS port does not answer plaintext"


async def test_bad_input_is_invalid_argument_naming_the_field(tls_server: tuple[int, bytes]) -> None:
    port, root = tls_server
    async with secure(port, root, TOKEN) as api:
        for call, message in [
            (api.register("acme", "web", "10.0.0.999", 80), "address: '10.0.0.999' is not an IPv4 address"),
            (api.register("acme", "web", "10.0.0.9", 0), "port.port: 0 is outside 1-65535"),
            (api.register("acme", "web", "10.0.0.9", 80, protocol="ICMP"), "port.protocol: 'ICMP' is not one of"),
            (api.tunnels("", "web"), "account: required when load_balancer is given"),
            (api.load_balancer("Acme", "web"), "account: 'Acme' is not a lowercase DNS label"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (raised.value.details() or "").startswith(message)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (client.ApiException(status=422, reason="Unprocessable Entity"), grpc.StatusCode.INVALID_ARGUMENT),
        (client.ApiException(status=404, reason="Not Found"), grpc.StatusCode.NOT_FOUND),
        (client.ApiException(status=409, reason="Conflict"), grpc.StatusCode.ABORTED),
        (client.ApiException(status=403, reason="Forbidden"), grpc.StatusCode.INTERNAL),
        (client.ApiException(status=429, reason="Too Many Requests"), grpc.StatusCode.UNAVAILABLE),
        (client.ApiException(status=503, reason="Service Unavailable"), grpc.StatusCode.UNAVAILABLE),
        (ConnectionRefusedError(), grpc.StatusCode.UNAVAILABLE),
        (KeyError("spec"), grpc.StatusCode.INTERNAL),
    ],
)
def test_only_passing_trouble_is_unavailable_which_agents_retry(error: Exception, code: grpc.StatusCode) -> None:
    assert server.status_of(error)[0] is code
