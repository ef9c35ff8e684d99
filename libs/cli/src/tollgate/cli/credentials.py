"""An account's credentials for the registration API: a random token in the Secret `tollgate-agent-credentials`
(key `token`) of the account's user namespace. The account is the Secret's namespace, so the allocator never
trusts a request for it. `epicctl credentials create|rotate` and tollgate.testing.agents mint through here."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from kubernetes import client

from tollgate.cli.exits import CommandError, Exit
from tollgate.models.epic import AGENT_CREDENTIALS_SECRET, AGENT_TOKEN_KEY, account_namespace

TOKEN_BYTES = 32


def new_token() -> str:
    """A random token: 32 bytes from the operating system's CSPRNG, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def _body(account: str, token: str) -> client.V1Secret:
    labels = {"app.kubernetes.io/part-of": "tollgate", "app.kubernetes.io/component": "agent-credentials"}
    metadata = client.V1ObjectMeta(name=AGENT_CREDENTIALS_SECRET, namespace=account_namespace(account), labels=labels)
    return client.V1Secret(metadata=metadata, type="Opaque", string_data={AGENT_TOKEN_KEY: token})


def create(core: client.CoreV1Api, account: str) -> str:
    """Mint the account's first token; CONFLICT when it has one already (rotate replaces it)."""
    token = new_token()
    namespace = account_namespace(account)
    try:
        core.create_namespaced_secret(namespace, _body(account, token))
    except client.ApiException as error:
        if error.status == 409:
            raise CommandError(
                f"account {account} has credentials already (Secret {namespace}/{AGENT_CREDENTIALS_SECRET}): "
                f"`epicctl credentials rotate {account}` replaces them",
                Exit.CONFLICT,
            ) from None
        if error.status == 404:
            raise CommandError(f"account {account}: no user namespace {namespace}", Exit.NOT_FOUND) from None
        raise
    return token


def rotate(core: client.CoreV1Api, account: str) -> str:
    """Replace the account's token: the old one is refused as soon as the allocator sees the change."""
    token = new_token()
    namespace = account_namespace(account)
    try:
        core.replace_namespaced_secret(AGENT_CREDENTIALS_SECRET, namespace, _body(account, token))
    except client.ApiException as error:
        if error.status == 404:
            raise CommandError(
                f"account {account} has no credentials (Secret {namespace}/{AGENT_CREDENTIALS_SECRET}): "
                f"`epicctl credentials create {account}` mints them",
                Exit.NOT_FOUND,
            ) from None
        raise
    return token


def write_token(path: Path, token: str) -> None:
    """`token` into `path`, readable by its owner only (mode 0600 from the start, never wider)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(token + "\n")
