"""Per-account credentials of the registration API: which account a bearer token stands for.

Each account's token is the `token` of the Secret tollgate-agent-credentials in its user namespace (minted by
`epicctl credentials create|rotate`); the account is the Secret's namespace. `CredentialMap` is the pure
bookkeeping (SHA-256 of each token -> account, ordered by resourceVersion so that a late list never undoes a newer
watch event); `Credentials` keeps it current from a watch and answers the server's lookups, re-listing on a miss
at most once per `relist_seconds` (an attacker sending random tokens cannot make it read the API server more).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tollgate.models.epic import AGENT_TOKEN_KEY, account_of

log = logging.getLogger("tollgate.allocator.credentials")
JSON = dict[str, Any]
RELIST_SECONDS = 2.0


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _version(resource_version: str | None) -> int:
    """An object's resourceVersion as a number (etcd's revision); 0 when absent or not a number."""
    try:
        return int(resource_version or 0)
    except ValueError:
        return 0


def token_of(secret: JSON) -> str | None:
    """The token of a Secret (wire form: base64 `data`), None when it has none."""
    encoded = (secret.get("data") or {}).get(AGENT_TOKEN_KEY)
    if not encoded:
        return None
    token = base64.b64decode(encoded).decode(errors="replace").strip()
    return token or None


@dataclass(frozen=True)
class Entry:
    account: str
    digest: bytes | None  # None: deleted (a tombstone, so that an older event cannot bring it back)
    version: int


class CredentialMap:
    """Token digest -> account. Only SHA-256 digests are kept and compared: how long a lookup of a wrong token
    takes can tell at most how many leading bytes of its digest match a stored one, which says nothing about any
    token (a preimage of SHA-256), so the lookup is constant-time in everything that matters."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}  # by namespace
        self._accounts: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self._accounts)

    def _rebuild(self) -> None:
        self._accounts = {e.digest: e.account for e in self._entries.values() if e.digest is not None}

    def _put(self, namespace: str, entry: Entry) -> bool:
        current = self._entries.get(namespace)
        if current is not None and entry.version and current.version > entry.version:
            return False  # older than what we know
        self._entries[namespace] = entry
        return True

    def apply(self, kind: str, secret: JSON) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) of a credentials Secret."""
        meta = secret["metadata"]
        namespace, version = str(meta["namespace"]), _version(meta.get("resourceVersion"))
        token = None if kind == "DELETED" else token_of(secret)
        entry = Entry(account_of(namespace), digest(token) if token else None, version)
        if self._put(namespace, entry):
            self._rebuild()

    def replace(self, secrets: Iterable[JSON], list_version: str | None) -> None:
        """A full list at resourceVersion `list_version`: what it lacks is gone, unless a newer event said more."""
        listed = set()
        for secret in secrets:
            meta = secret["metadata"]
            namespace = str(meta["namespace"])
            listed.add(namespace)
            token = token_of(secret)
            self._put(
                namespace,
                Entry(account_of(namespace), digest(token) if token else None, _version(meta.get("resourceVersion"))),
            )
        version = _version(list_version)
        for namespace, entry in list(self._entries.items()):
            if namespace not in listed and (not version or entry.version <= version):
                self._entries[namespace] = Entry(entry.account, None, version)
        self._rebuild()

    def account_of(self, token: str) -> str | None:
        return self._accounts.get(digest(token))


Lister = Callable[[], tuple[list[JSON], str]]
Watcher = Callable[[str, Callable[[str, JSON], None], threading.Event], str]


class Credentials:
    """The map kept current: a thread lists and watches the credentials Secrets of every namespace (field selector
    on their name), posting each change to the event loop; the gRPC server asks `account_of` per call."""

    def __init__(self, lister: Lister, watcher: Watcher, relist_seconds: float = RELIST_SECONDS) -> None:
        self.map = CredentialMap()
        self.lister = lister
        self.watcher = watcher
        self.relist_seconds = relist_seconds
        self.listed = asyncio.Event()
        self.stop = threading.Event()
        self._last_list = 0.0
        self._relisting: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="agent-credentials", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stop.set()

    def _post(self, function: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(function, *args)

    def _replace(self, secrets: list[JSON], version: str) -> None:
        self.map.replace(secrets, version)
        self._last_list = time.monotonic()
        self.listed.set()

    def _run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                secrets, version = self.lister()
                self._post(self._replace, secrets, version)
                failures = 0
                while not self.stop.is_set():
                    version = self.watcher(version, lambda kind, obj: self._post(self.map.apply, kind, obj), self.stop)
            except RuntimeError:  # the event loop closed: the service is stopping
                return
            except Exception as error:  # 410 Gone, a dropped connection, the API server away: list again
                log.warning("watching agent credentials failed: %s: %s", type(error).__name__, error)
                self.stop.wait(min(30.0, 0.5 * 2**failures))
                failures += 1

    async def account_of(self, token: str) -> str | None:
        """The account `token` stands for, None if none. A miss re-lists once per `relist_seconds` at most, so a
        token minted a moment ago is accepted even if its watch event is still on the way."""
        account = self.map.account_of(token)
        if account is not None or not token:
            return account
        if self._relisting is None and time.monotonic() - self._last_list >= self.relist_seconds:
            self._relisting = asyncio.ensure_future(self._relist())
        if self._relisting is not None:
            await asyncio.shield(self._relisting)
        return self.map.account_of(token)

    async def _relist(self) -> None:
        try:
            secrets, version = await asyncio.to_thread(self.lister)
            self._replace(secrets, version)
        except Exception as error:  # the watch keeps the map; this lookup answers from it
            log.warning("re-listing agent credentials failed: %s: %s", type(error).__name__, error)
            self._last_list = time.monotonic()
        finally:
            self._relisting = None
