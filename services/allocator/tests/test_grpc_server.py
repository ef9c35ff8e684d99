"""The gRPC layer on its own, over a real grpcio server: TLS reloaded from files, per-account tokens, status codes
for calls refused before any API call, and the limits (the end-to-end tests cover the rest against a cluster)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client

from tollgate.allocator.__main__ import Settings, credentials, limits
from tollgate.allocator.credentials import CredentialMap, Credentials
from tollgate.allocator.grpc import server
from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.allocator.k8s import Kube
from tollgate.allocator.registry import Registry
from tollgate.allocator.tunnels import EpicSingleton, Metrics, SeedTunnelIDs
from tollgate.models.epic import EPICSpec, GUEEndpoint
from tollgate.testing.wait import eventually

JSON = dict[str, Any]
ACME, OTHER = "acme-token", "other-token"


def secret(account: str, token: str | None, version: int) -> JSON:
    data = {"token": base64.b64encode(token.encode()).decode()} if token is not None else {}
    meta = {"name": "tollgate-agent-credentials", "namespace": f"epic-{account}", "resourceVersion": str(version)}
    return {"metadata": meta, "data": data}


def self_signed(directory: Path) -> bytes:
    """A serving pair for localhost in `directory` (tls.crt, tls.key); the certificate, which is its own CA."""
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
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    directory.mkdir(parents=True, exist_ok=True)
    for name_, data in (
        ("tls.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())),
        ("tls.crt", pem),
    ):  # fmt: skip
        temporary = directory / f".{name_}.tmp"
        temporary.write_bytes(data)
        temporary.replace(directory / name_)  # as a Secret volume swaps its files: never half a pair on disk
    return pem


@dataclass
class Store:
    """The credentials Secrets an API server would list: the Credentials' lister, counting its calls; `hold`
    makes a list wait (an API server that is slow to answer)."""

    secrets: list[JSON] = field(default_factory=list)
    lists: int = 0
    hold: threading.Event | None = None

    def list(self) -> tuple[list[JSON], str]:
        self.lists += 1
        if self.hold is not None:
            self.hold.wait(10)
        return list(self.secrets), str(max((int(s["metadata"]["resourceVersion"]) for s in self.secrets), default=1))

    def watch(self, version: str, on_event: Callable[[str, JSON], None], stop: threading.Event) -> str:
        stop.wait()
        return version


@dataclass
class Served:
    port: int
    ca: bytes
    store: Store
    directory: Path

    def client(self, token: str, ca: bytes | None = None) -> AllocatorClient:
        channel_credentials = grpc.ssl_channel_credentials(root_certificates=ca or self.ca)
        return AllocatorClient(f"localhost:{self.port}", token, channel_credentials, timeout=5)


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, settings: Settings, relist_seconds: float = 60) -> AsyncIterator[Served]:
    directory = tmp_path / "certs"
    ca = self_signed(directory)
    store = Store([secret("acme", ACME, 10), secret("other", OTHER, 11)])
    accounts = Credentials(store.list, store.watch, relist_seconds)
    accounts.start()
    kube = Kube(client.ApiClient(client.Configuration(host="https://127.0.0.1:1")))  # never reached
    epic = EpicSingleton(kube, EPICSpec())
    registry = Registry(kube, SeedTunnelIDs(epic, Metrics()), epic, GUEEndpoint(epic_address=IPv4Address("10.0.0.1")))
    settings = settings.model_copy(update={"grpc_cert_dir": directory})
    grpc_server, port = await server.start(registry, accounts, "127.0.0.1:0", credentials(settings), limits(settings))
    await asyncio.wait_for(accounts.listed.wait(), 5)
    yield Served(port, ca, store, directory)
    accounts.close()
    await grpc_server.stop(grace=None)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with serve(tmp_path, Settings()) as running:
        yield running


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_a_token_acts_on_its_own_account_only(served: Served) -> None:
    async with served.client(ACME) as acme:
        for call in (
            acme.register("other", "web", "10.0.0.9", 80),
            acme.unregister("other", "web", "10.0.0.9"),
            acme.load_balancer("other", "web"),
            acme.tunnels("other"),
        ):
            error = await refused(call)
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED
            assert error.details() == (
                "account: 'other' is not the token's account ('acme'); a token acts on its own account only"
            )
        error = await refused(acme.tunnels(""))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, "no listing of every account"
        assert error.details() == "account: required (the account this call acts on)"
        # Its own account passes authorization and reaches the (unreachable) API server.
        assert (await refused(acme.tunnels("acme"))).code() == grpc.StatusCode.UNAVAILABLE
    for token in ("", "wrong", ACME + "x"):
        async with served.client(token) as intruder:
            error = await refused(intruder.tunnels("acme"))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, token
        assert (error.details() or "").startswith("authorization: a valid bearer token is required")


async def test_unknown_tokens_re_list_at_most_once_per_interval(served: Served) -> None:
    lists = served.store.lists
    for attempt in range(20):
        async with served.client(f"guess-{attempt}") as intruder:
            assert (await refused(intruder.tunnels("acme"))).code() == grpc.StatusCode.UNAUTHENTICATED
    assert served.store.lists - lists <= 1, "random tokens must not drive API reads"


async def test_a_token_minted_after_the_list_is_accepted_by_the_re_list_its_miss_triggers(tmp_path: Path) -> None:
    store = Store([secret("acme", ACME, 10)])
    accounts = Credentials(store.list, store.watch, relist_seconds=0)
    accounts.start()
    await asyncio.wait_for(accounts.listed.wait(), 5)
    store.secrets = [secret("acme", "rotated", 12)]
    assert await accounts.account_of("rotated") == "acme"
    assert await accounts.account_of(ACME) is None, "the rotated token is gone"
    accounts.close()


async def test_bad_input_is_invalid_argument_naming_the_field(served: Served) -> None:
    async with served.client(ACME) as api:
        for call, message in [
            (api.register("acme", "web", "10.0.0.999", 80), "address: '10.0.0.999' is not an IPv4 address"),
            (api.register("acme", "web", "10.0.0.9", 0), "port.port: 0 is outside 1-65535"),
            (api.register("acme", "web", "10.0.0.9", 80, protocol="ICMP"), "port.protocol: 'ICMP' is not one of"),
            (api.register("", "web", "10.0.0.9", 80), "account: required"),
            (api.load_balancer("acme", "Web"), "name: 'Web' is not a lowercase DNS label"),
        ]:
            error = await refused(call)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (error.details() or "").startswith(message), error.details()


async def test_tls_only_and_a_renewed_certificate_serves_without_restart(served: Served) -> None:
    async with AllocatorClient(f"localhost:{served.port}", ACME, timeout=2) as plaintext:
        error = await refused(plaintext.tunnels("acme"))
    assert error.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}, "no plaintext"
    renewed = self_signed(served.directory)
    async with served.client(ACME, renewed) as api:  # a new connection: the new pair
        assert (await refused(api.tunnels("other"))).code() == grpc.StatusCode.PERMISSION_DENIED
    async with served.client(ACME, served.ca) as stale:
        assert (await refused(stale.tunnels("acme"))).code() == grpc.StatusCode.UNAVAILABLE, "the old pair is gone"


async def test_a_request_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    async with serve(tmp_path, Settings(grpc_max_message_bytes=2048)) as running, running.client(ACME) as api:
        error = await refused(api.register("acme", "web", "10.0.0.9", 80, port_name="x" * 4096))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await refused(api.register("acme", "web", "10.0.0.9", 0))).code() == (
            grpc.StatusCode.INVALID_ARGUMENT
        ), "a small request still passes the limit"


async def test_calls_beyond_the_concurrency_limit_are_refused(tmp_path: Path) -> None:
    async with serve(tmp_path, Settings(grpc_max_concurrent_rpcs=1), relist_seconds=0) as running:
        store = running.store
        store.hold = threading.Event()  # the re-list a wrong token triggers hangs: its call stays open
        async with running.client("wrong") as slow, running.client(ACME) as api:
            pending = asyncio.ensure_future(slow.tunnels("acme"))

            async def relisting() -> bool:
                return store.lists == 2

            await eventually(relisting, "the wrong token's re-list to start", timeout=5)
            error = await refused(api.tunnels("acme"))
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            store.hold.set()
            assert (await refused(pending)).code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_map_follows_the_newest_version_of_each_secret() -> None:
    accounts = CredentialMap()
    accounts.replace([secret("acme", "one", 5)], "5")
    assert accounts.account_of("one") == "acme"
    accounts.apply("MODIFIED", secret("acme", "two", 7))
    accounts.replace([secret("acme", "one", 5)], "6")  # a list older than the event: the event stands
    assert (accounts.account_of("one"), accounts.account_of("two")) == (None, "acme")
    accounts.apply("DELETED", secret("acme", "two", 8))
    assert accounts.account_of("two") is None
    accounts.apply("ADDED", secret("acme", "two", 7))  # a late, older event cannot bring it back
    assert accounts.account_of("two") is None
    accounts.apply("ADDED", secret("beta", "one", 9))
    assert accounts.account_of("one") == "beta", "the account is the Secret's namespace"
    accounts.replace([], "10")
    assert len(accounts) == 0
    accounts.apply("ADDED", secret("gamma", None, 11))
    assert len(accounts) == 0, "a Secret without a token grants nothing"


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
