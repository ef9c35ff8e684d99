"""An account's users of EPIC's REST API: bcrypt `user:hash` lines (tollgate.runtime.htpasswd) under the key `auth`
of the Secret `api-users` in its user namespace, which the REST API checks HTTP Basic against. `epicctl create|delete
user` write through here: read the Secret, change its text, write it back carrying the resourceVersion read (create
it when absent), and on 409 read it again, so that concurrent writers never lose each other's lines."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

from kubernetes import client

from tollgate.cli.exits import CommandError, Exit
from tollgate.models.epic import API_USERS_KEY, API_USERS_SECRET, Account, account_namespace
from tollgate.runtime import htpasswd
from tollgate.runtime.optimistic import CONFLICT_BACKOFF

MIN_PASSWORD_LENGTH = 6  # as EPIC's epicctl requires
ATTEMPTS = 20
LABELS = {"app.kubernetes.io/part-of": "tollgate", "app.kubernetes.io/managed-by": "epicctl",
          "app.kubernetes.io/component": "api-users"}  # fmt: skip
# EPIC makes the Secret with these, for Contour's authserver (HTTP Basic, realm epicauth).
ANNOTATIONS = {"projectcontour.io/auth-type": "basic", "projectcontour.io/auth-realm": "epicauth"}


def check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ValueError(f"password: at least {MIN_PASSWORD_LENGTH} characters, got {len(password)}")


def password_from_text(text: str) -> str:
    """The password in a file or piped stdin: its first line. A further line must repeat it (piped, EPIC's epicctl
    reads the password and its confirmation, one a line); blank lines after it are ignored."""
    first, *others = text.splitlines() or [""]
    if any(line and line != first for line in others):
        raise ValueError("password: the input's lines differ; give the password on one line (or twice, one a line)")
    return first


def check_account(custom: client.CustomObjectsApi, account: str) -> None:
    """CommandError (NOT_FOUND) unless the Account `account` is in its user namespace."""
    info, namespace = Account.resource, account_namespace(account)
    try:
        custom.get_namespaced_custom_object(info.group, info.version, namespace, info.plural, account)
    except client.ApiException as error:
        if error.status == 404:
            raise CommandError(
                f"account: no account {account!r} (no Account {namespace}/{account}); "
                f"`epicctl create user-namespace {account}` makes one",
                Exit.NOT_FOUND,
            ) from None
        raise


def set_user(core: client.CoreV1Api, account: str, user: str, hashed: str) -> bool:
    """Give `user` the bcrypt hash `hashed`, keeping the other users; whether it replaced a line of `user`."""
    before = _edit(core, account, lambda text: htpasswd.with_user(text, user, hashed))
    return user in htpasswd.parse(before)


def remove_user(core: client.CoreV1Api, account: str, user: str) -> bool:
    """Remove `user`'s line; whether there was one (nothing is written when there was not)."""
    before = _edit(core, account, lambda text: htpasswd.without_user(text, user))
    return user in htpasswd.parse(before)


def _edit(core: client.CoreV1Api, account: str, change: Callable[[str], str]) -> str:
    """Write `change(text)` over the Secret's text (unless it is the same), retrying on conflict; the text before."""
    namespace = account_namespace(account)
    where = f"Secret {namespace}/{API_USERS_SECRET}"
    for attempt in range(ATTEMPTS):
        current = _read(core, namespace)
        secret = current or _new_secret(namespace)
        data = dict(secret.data or {})
        try:
            before = base64.b64decode(data.get(API_USERS_KEY, "")).decode()
            after = change(before)
        except ValueError as error:
            raise CommandError(f"{where}, key {API_USERS_KEY}: {error}; fix it with kubectl edit") from None
        if after == before:
            return before
        secret.data = data | {API_USERS_KEY: base64.b64encode(after.encode()).decode()}
        try:
            if current is None:
                core.create_namespaced_secret(namespace, secret)
            else:
                core.replace_namespaced_secret(API_USERS_SECRET, namespace, secret)
        except client.ApiException as error:
            if error.status != 409:  # 409: another writer was first (AlreadyExists or Conflict): read again
                raise
            time.sleep(CONFLICT_BACKOFF.pause(attempt))
            continue
        return before
    raise CommandError(f"{where} kept changing under {ATTEMPTS} attempts to write it: try again", Exit.CONFLICT)


def _read(core: client.CoreV1Api, namespace: str) -> client.V1Secret | None:
    try:
        secret: client.V1Secret = core.read_namespaced_secret(API_USERS_SECRET, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return secret


def _new_secret(namespace: str) -> client.V1Secret:
    metadata = client.V1ObjectMeta(name=API_USERS_SECRET, namespace=namespace, labels=LABELS, annotations=ANNOTATIONS)
    return client.V1Secret(metadata=metadata, type="Opaque", data={})
