"""The TLS test environments of the two services that serve over TLS: the allocator's gRPC API and the webhook.

endpoint = tls_endpoint(tmp_path / "allocator-tls")       # a free port, a CA and a serving certificate
run_service("allocator", env=allocator_env(endpoint, TOLLGATE_ALLOCATOR_GUE_ADDRESS="192.168.1.40"))
run_service("webhook", env=webhook_env(tls_endpoint(tmp_path / "webhook-tls")))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tollgate.testing.agents import certificates
from tollgate.testing.net import free_port

HOST = "127.0.0.1"


@dataclass(frozen=True)
class TLSEndpoint:
    """Where a test's server listens (on HOST), and the CA of its serving certificate (next to tls.crt and tls.key,
    in the directory the service reads them from)."""

    port: int
    ca_file: Path

    @property
    def cert_dir(self) -> Path:
        return self.ca_file.parent

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.address}"

    @property
    def ca(self) -> bytes:
        return self.ca_file.read_bytes()

    def on_free_port(self) -> TLSEndpoint:
        """The same certificate on another free port: for replicas of one server."""
        return dataclasses.replace(self, port=free_port(HOST))


def tls_endpoint(directory: Path) -> TLSEndpoint:
    """A free port and a CA and serving certificate in `directory`, written as `make dev` writes them."""
    return TLSEndpoint(free_port(HOST), certificates(directory))


def allocator_env(endpoint: TLSEndpoint, **extra: str) -> dict[str, str]:
    """The allocator's settings to serve its gRPC API at `endpoint`, plus `extra`."""
    return {
        "TOLLGATE_ALLOCATOR_GRPC_ADDRESS": endpoint.address,
        "TOLLGATE_ALLOCATOR_GRPC_CERT_DIR": str(endpoint.cert_dir),
        **extra,
    }


def webhook_env(endpoint: TLSEndpoint, **extra: str) -> dict[str, str]:
    """The webhook's settings to serve admission reviews at `endpoint`, plus `extra`."""
    return {
        "TOLLGATE_WEBHOOK_HOST": HOST,
        "TOLLGATE_WEBHOOK_PORT": str(endpoint.port),
        "TOLLGATE_WEBHOOK_CERT_DIR": str(endpoint.cert_dir),
        **extra,
    }
