"""Per-account credentials, kept in memory from a watch of one Secret name in every user namespace: the account is
the Secret's namespace.

- The registration API's bearer tokens: the `token` of the Secret tollgate-agent-credentials (minted by `epicctl
  credentials create|rotate`). `CredentialMap` keeps SHA-256 of each token -> account.
- The REST API's HTTP Basic users: the htpasswd text `auth` of the Secret api-users (`epicctl create user`),
  `ApiUsers`.

`SecretMap` is the pure bookkeeping (ordered by resourceVersion, so that a late list never undoes a newer watch
event); `WatchedSecrets` keeps one current from a list and watch and answers lookups, re-listing on a miss at most
once per `relist_seconds` (an attacker sending random tokens or account names cannot make it read the API server
more).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tollgate.models.epic import AGENT_TOKEN_KEY, API_USERS_KEY, account_namespace, account_of

log = logging.getLogger("tollgate.allocator.credentials")
JSON = dict[str, Any]
RELIST_SECONDS = 2.0
V = TypeVar("V")
T = TypeVar("T")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _version(resource_version: str | None) -> int:
    """An object's resourceVersion as a number (etcd's revision); 0 when absent or not a number."""
    try:
        return int(resource_version or 0)
    except ValueError:
        return 0


def secret_value(secret: JSON, key: str) -> str | None:
    """One key of a Secret (wire form: base64 `data`), None when it has none."""
    encoded = (secret.get("data") or {}).get(key)
    return None if not encoded else base64.b64decode(encoded).decode(errors="replace")


def token_of(secret: JSON) -> str | None:
    """The token of a credentials Secret, None when it has none."""
    token = (secret_value(secret, AGENT_TOKEN_KEY) or "").strip()
    return token or None


@dataclass(frozen=True)
class Entry(Generic[V]):
    account: str
    value: V | None  # None: deleted (a tombstone, so that an older event cannot bring it back)
    version: int


class SecretMap(Generic[V]):
    """Namespace -> what the Secret of one name holds there (`read(secret)`, None for nothing usable), kept from a
    list and its watch events: ordered by resourceVersion, so that a late list never undoes a newer event."""

    def __init__(self, read: Callable[[JSON], V | None]) -> None:
        self.read = read
        self._entries: dict[str, Entry[V]] = {}  # by namespace

    def _put(self, namespace: str, entry: Entry[V]) -> bool:
        current = self._entries.get(namespace)
        if current is not None and entry.version and current.version > entry.version:
            return False  # older than what we know
        self._entries[namespace] = entry
        return True

    def _entry(self, secret: JSON, deleted: bool = False) -> tuple[str, Entry[V]]:
        meta = secret["metadata"]
        namespace = str(meta["namespace"])
        value = None if deleted else self.read(secret)
        return namespace, Entry(account_of(namespace), value, _version(meta.get("resourceVersion")))

    def apply(self, kind: str, secret: JSON) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) of one of the Secrets."""
        if self._put(*self._entry(secret, deleted=kind == "DELETED")):
            self.changed()

    def replace(self, secrets: Iterable[JSON], list_version: str | None) -> None:
        """A full list at resourceVersion `list_version`: what it lacks is gone, unless a newer event said more."""
        listed = set()
        for secret in secrets:
            namespace, entry = self._entry(secret)
            listed.add(namespace)
            self._put(namespace, entry)
        version = _version(list_version)
        for namespace, entry in list(self._entries.items()):
            if namespace not in listed and (not version or entry.version <= version):
                self._entries[namespace] = Entry(entry.account, None, version)
        self.changed()

    def get(self, namespace: str) -> V | None:
        entry = self._entries.get(namespace)
        return None if entry is None else entry.value

    def changed(self) -> None:
        """Called after each change: for a subclass's indexes."""

    def values(self) -> Iterator[Entry[V]]:
        return iter(self._entries.values())


class CredentialMap(SecretMap[bytes]):
    """Token digest -> account. Only SHA-256 digests are kept and compared: how long a lookup of a wrong token
    takes can tell at most how many leading bytes of its digest match a stored one, which says nothing about any
    token (a preimage of SHA-256), so the lookup is constant-time in everything that matters."""

    def __init__(self) -> None:
        super().__init__(lambda secret: digest(token) if (token := token_of(secret)) else None)
        self._accounts: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self._accounts)

    def changed(self) -> None:
        self._accounts = {e.value: e.account for e in self.values() if e.value is not None}

    def account_of(self, token: str) -> str | None:
        return self._accounts.get(digest(token))


M = TypeVar("M", bound=SecretMap[Any])
Lister = Callable[[], tuple[list[JSON], str]]
Watcher = Callable[[str, Callable[[str, JSON], None], threading.Event], str]


class WatchedSecrets(Generic[M]):
    """A SecretMap kept current: a thread lists and watches the Secrets of one name in every namespace (field
    selector on their name), posting each change to the event loop. `lookup` answers from it, re-listing on a miss at
    most once per `relist_seconds` (so that a Secret written a moment ago counts, and lookups of what does not exist
    cannot make it read the API server more)."""

    def __init__(self, map_: M, lister: Lister, watcher: Watcher, relist_seconds: float = RELIST_SECONDS) -> None:
        self.map = map_
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
        self._thread = threading.Thread(target=self._run, name=f"secrets-{id(self)}", daemon=True)
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
                log.warning("watching Secrets failed: %s: %s", type(error).__name__, error)
                self.stop.wait(min(30.0, 0.5 * 2**failures))
                failures += 1

    async def lookup(self, find: Callable[[M], T | None]) -> T | None:
        """`find(map)`; on a miss, again after a re-list, when none ran in the last `relist_seconds`."""
        found = find(self.map)
        if found is not None:
            return found
        if self._relisting is None and time.monotonic() - self._last_list >= self.relist_seconds:
            self._relisting = asyncio.ensure_future(self._relist())
        if self._relisting is not None:
            await asyncio.shield(self._relisting)
        return find(self.map)

    async def _relist(self) -> None:
        try:
            secrets, version = await asyncio.to_thread(self.lister)
            self._replace(secrets, version)
        except Exception as error:  # the watch keeps the map; this lookup answers from it
            log.warning("re-listing Secrets failed: %s: %s", type(error).__name__, error)
            self._last_list = time.monotonic()
        finally:
            self._relisting = None


class Credentials(WatchedSecrets[CredentialMap]):
    """The agents' bearer tokens; the gRPC server and the REST API ask `account_of` per call."""

    def __init__(self, lister: Lister, watcher: Watcher, relist_seconds: float = RELIST_SECONDS) -> None:
        super().__init__(CredentialMap(), lister, watcher, relist_seconds)

    async def account_of(self, token: str) -> str | None:
        """The account `token` stands for, None if none."""
        if not token:
            return None
        return await self.lookup(lambda tokens: tokens.account_of(token))


class ApiUsers(WatchedSecrets[SecretMap[str]]):
    """Each account's htpasswd text, for the REST API's HTTP Basic."""

    def __init__(self, lister: Lister, watcher: Watcher, relist_seconds: float = RELIST_SECONDS) -> None:
        super().__init__(SecretMap(lambda secret: secret_value(secret, API_USERS_KEY)), lister, watcher, relist_seconds)

    async def users_of(self, account: str) -> str | None:
        """The htpasswd text of the account's Secret api-users, None without one."""
        return await self.lookup(lambda users: users.get(account_namespace(account)))
