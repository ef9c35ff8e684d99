"""The registration API as an agent reaches it: over TLS, trusting the CA of the allocator's serving certificate,
with its account's token minted by epicctl's own code (tollgate.cli.credentials), as a user would mint it.

    certificates(tmp_path / "allocator")        # ca.crt, tls.crt, tls.key; TOLLGATE_ALLOCATOR_GRPC_CERT_DIR
    agent = Agent.mint(core, "acme", ca_file)   # the Secret epic-acme/tollgate-agent-credentials, created or rotated
    AllocatorClient(address, agent.token, agent.channel_credentials())
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
from kubernetes import client

from tollgate.cli import credentials
from tollgate.cli.exits import CommandError, Exit

CA_FILE = "ca.crt"
HOSTS = ("127.0.0.1", "localhost")


def certificates(directory: Path, hosts: tuple[str, ...] = HOSTS) -> Path:
    """A CA and a serving certificate for `hosts` in `directory` (written by the webhook's cert CLI, as `make dev`
    writes them; kept when present); the CA file."""
    command = [sys.executable, "-m", "tollgate.webhook.cli", "certs", "--dir", str(directory)]
    subprocess.run([*command, *(f"--host={host}" for host in hosts)], capture_output=True, text=True, check=True)
    return directory / CA_FILE


def mint(core: client.CoreV1Api, account: str) -> str:
    """A fresh token of `account`, as `epicctl credentials create` mints it (`rotate` when it has one already)."""
    try:
        return credentials.create(core, account)
    except CommandError as error:
        if error.code != Exit.CONFLICT:
            raise
    return credentials.rotate(core, account)


def channel_credentials(ca_file: Path) -> grpc.ChannelCredentials:
    """TLS trusting the CA in `ca_file` (the allocator's)."""
    return grpc.ssl_channel_credentials(root_certificates=ca_file.read_bytes())


def read_token(path: Path) -> str:
    """A token as `epicctl credentials create|rotate --token-file` wrote it."""
    return path.read_text().strip()


@dataclass(frozen=True)
class Agent:
    account: str
    token: str
    ca: bytes

    @classmethod
    def mint(cls, core: client.CoreV1Api, account: str, ca_file: Path) -> Agent:
        return cls(account, mint(core, account), ca_file.read_bytes())

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca)
