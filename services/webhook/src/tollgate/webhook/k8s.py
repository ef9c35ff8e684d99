"""The API calls of the webhook: list/watch informers feeding the cache, and (for installers and tests)
creating and deleting the webhook configurations.

The informers run the blocking kubernetes client in one thread per kind and hand every list and event to
the event loop, so the cache is only ever touched by the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from tollgate.runtime.backoff import Backoff
from tollgate.runtime.kube import Watch, is_conflict, is_not_found, timeouts
from tollgate.webhook.cache import Store
from tollgate.webhook.kinds import Kind
from tollgate.webhook.registration import Registration

log = logging.getLogger("tollgate.webhook.k8s")

RELIST_SECONDS = 600.0
# Informers that lost the API server together must not come back together: jittered, doubling to 30 s.
WATCH_BACKOFF = Backoff(base=0.5, cap=30.0, jitter=0.5)


class Informer:
    """List, then watch from the list's resourceVersion; list again every RELIST_SECONDS, when the watch expires
    (410) or when it fails, and replace the cache with the list, saying what the watch had missed.

    The API client gives up on a watch silent for longer than its server timeout plus a margin (see
    tollgate.runtime.kube), so a watch hung on a half-open connection ends, and the informer lists again on a
    new connection."""

    def __init__(
        self,
        api: client.ApiClient,
        kind: Kind,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        stop: threading.Event,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> None:
        self.kind = kind
        self.store = store
        self.loop = loop
        self.stop = stop
        self.namespace = None if kind.cluster_scoped else namespace
        self.label_selector = label_selector
        self.custom = client.CustomObjectsApi(api)
        self.thread = threading.Thread(target=self._run, name=f"informer-{kind.plural}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _call(self) -> tuple[Callable[..., Any], tuple[str, ...]]:
        kind = self.kind
        if self.namespace:
            return self.custom.list_namespaced_custom_object, (kind.group, kind.version, self.namespace, kind.plural)
        return self.custom.list_cluster_custom_object, (kind.group, kind.version, kind.plural)

    def _options(self) -> dict[str, Any]:
        return {"label_selector": self.label_selector} if self.label_selector else {}

    def _post(self, func: Callable[..., None], *args: Any) -> None:
        self.loop.call_soon_threadsafe(func, *args)

    def _list(self) -> str:
        func, args = self._call()
        listing = func(*args, **self._options())
        self._post(self._replace, listing.get("items", []))
        log.debug("listed", extra={"kind": self.kind.name, "count": len(listing.get("items", []))})
        return str(listing["metadata"]["resourceVersion"])

    def _replace(self, items: list[dict[str, Any]]) -> None:
        """On the event loop: the list is the whole truth; log what the cache had wrong (once it had listed)."""
        synced = self.kind.name not in self.store.unsynced()
        missed = self.store.replace(self.kind.name, items)
        if synced and missed:
            log.warning(
                "the list differs from what the watch had said: the cache now follows the list",
                extra={"kind": self.kind.name, **missed},
            )

    def _watch(self, resource_version: str, until: float) -> str:
        """Stream events until the server ends the watch (by `until`, a monotonic time, at the latest); the
        resourceVersion to resume from."""
        func, args = self._call()
        watcher = Watch(resource_version)
        seconds = max(1, min(timeouts().watch, round(until - time.monotonic())))
        for kind, obj in watcher.events(func, *args, **self._options(), timeout_seconds=seconds):
            self._post(self.store.apply, self.kind.name, kind, obj)
            if self.stop.is_set():
                break
        return watcher.resource_version

    def _run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                resource_version = self._list()
                failures = 0
                relist_at = time.monotonic() + RELIST_SECONDS
                while not self.stop.is_set() and time.monotonic() < relist_at:
                    resource_version = self._watch(resource_version, relist_at)
            except client.ApiException as error:
                if error.status != 410:
                    log.warning("watch failed", extra={"kind": self.kind.name, "status": error.status})
                    self.stop.wait(WATCH_BACKOFF.pause(failures))
                    failures += 1
            except RuntimeError:  # the event loop closed: the service is stopping
                return
            except Exception as error:  # the connection dropped or hung; list again after a pause
                log.warning("watch failed", extra={"kind": self.kind.name, "error": f"{type(error).__name__}: {error}"})
                self.stop.wait(WATCH_BACKOFF.pause(failures))
                failures += 1


def start_informers(
    api: client.ApiClient,
    kinds: list[Kind],
    store: Store,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> threading.Event:
    """One informer per kind; set the returned event to stop them."""
    stop = threading.Event()
    loop = asyncio.get_running_loop()
    for kind in kinds:
        Informer(api, kind, store, loop, stop, namespace=namespace, label_selector=label_selector).start()
    return stop


def register(api: client.ApiClient, registration: Registration) -> None:
    """Create or replace both webhook configurations."""
    admission = client.AdmissionregistrationV1Api(api)
    calls: list[tuple[dict[str, Any], Any, Any, Any]] = [
        (
            registration.mutating(),
            admission.create_mutating_webhook_configuration,
            admission.read_mutating_webhook_configuration,
            admission.replace_mutating_webhook_configuration,
        ),
        (
            registration.validating(),
            admission.create_validating_webhook_configuration,
            admission.read_validating_webhook_configuration,
            admission.replace_validating_webhook_configuration,
        ),
    ]
    for body, create, read, replace in calls:
        try:
            create(body)
        except client.ApiException as error:
            if not is_conflict(error):
                raise
            body["metadata"]["resourceVersion"] = read(registration.name).metadata.resource_version
            replace(registration.name, body)


def unregister(api: client.ApiClient, name: str) -> None:
    """Delete both webhook configurations called `name`, if they exist."""
    admission = client.AdmissionregistrationV1Api(api)
    for delete in (
        admission.delete_mutating_webhook_configuration,
        admission.delete_validating_webhook_configuration,
    ):
        try:
            delete(name)
        except client.ApiException as error:
            if not is_not_found(error):
                raise
