"""Kubernetes client configuration: a kubeconfig file when given, in-cluster otherwise; every request with a
timeout."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client, config


@dataclass(frozen=True)
class KubeTimeouts:
    """How long one Kubernetes API call may take, in seconds. The kubernetes client has none by default: a call
    on a connection that stalls (a half-open TCP connection, a frozen peer) would wait forever."""

    request: float = 30.0  # one attempt at a request, connection included (see RETRIES)
    connect: float = 10.0  # the connection alone (also of watches)
    watch: int = 300  # the server-side length of a watch request (`timeoutSeconds`, whole seconds)

    def __post_init__(self) -> None:
        for name in ("request", "connect", "watch"):
            if not getattr(self, name) > 0:
                raise ValueError(f"KubeTimeouts.{name}: must be greater than 0, got {getattr(self, name)}")

    def watch_client(self, server_timeout: float | None = None) -> float:
        """How long the client waits for a watch of `server_timeout` (default: `watch`) to end: a little longer
        than the server's own timeout, so a healthy stream always ends server-side first and a silent one is
        given up on soon after."""
        server = self.watch if server_timeout is None else server_timeout
        return server + max(5.0, server / 10)


_defaults = KubeTimeouts()
# urllib3 tries an idempotent request that timed out or lost its connection again, on a new connection (the
# old one may be half-open): once, so that a call takes at most twice its timeout (urllib3's default is 3).
RETRIES = 1


def use_timeouts(timeouts: KubeTimeouts) -> None:
    """Make `timeouts` the defaults of this process's API clients (the service runtime does it from settings)."""
    global _defaults
    _defaults = timeouts


def timeouts() -> KubeTimeouts:
    """The timeouts of this process's API clients."""
    return _defaults


class TimeoutApiClient(client.ApiClient):
    """An ApiClient that gives every request its default timeout when the caller gave none: (connect, server
    timeout + a margin) to a watch, the request timeout to anything else."""

    def __init__(self, configuration: client.Configuration, timeouts: KubeTimeouts) -> None:
        super().__init__(configuration)
        self.timeouts = timeouts

    def call_api(  # type: ignore[no-untyped-def]
        self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None
    ):
        if _request_timeout is None:
            _request_timeout = self._default_timeout(url)
        return super().call_api(method, url, header_params, body, post_params, _request_timeout=_request_timeout)

    def _default_timeout(self, url: str) -> float | tuple[float, float]:
        query = parse_qs(urlsplit(url).query)
        if query.get("watch") != ["true"]:
            return self.timeouts.request
        server = query.get("timeoutSeconds")
        return self.timeouts.connect, self.timeouts.watch_client(float(server[0]) if server else None)


def api_client(kubeconfig: Path | None = None, pool_size: int | None = None) -> client.ApiClient:
    """An ApiClient for `kubeconfig`, else $KUBECONFIG, else the in-cluster service account, whose requests time
    out (see `timeouts()`); `pool_size` connections for as many threads calling it at once (default: 5 per CPU)."""
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    configuration = client.Configuration()
    if path is not None:
        config.load_kube_config(config_file=str(path), client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client_for(configuration, pool_size)


def client_for(configuration: client.Configuration, pool_size: int | None = None) -> client.ApiClient:
    """An ApiClient for a loaded `configuration` (as `api_client` makes one, for callers that find their
    configuration otherwise, such as epicctl), whose requests time out and are retried once."""
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    configuration.retries = RETRIES
    return TimeoutApiClient(configuration, _defaults)


def own_pod_reference() -> dict[str, Any] | None:
    """An ownerReference to the pod this process runs in (POD_NAME and POD_UID from the Downward API, as the
    charts set them), so that what the process makes for itself goes with its pod; None outside a pod."""
    name, uid = os.environ.get("POD_NAME"), os.environ.get("POD_UID")
    if not name or not uid:
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}


def raw_json(response: Any) -> dict[str, Any]:
    """The body of a call made with `_preload_content=False`, as the API server sent it: decoded once, where the
    client would build a model object per field (to be turned back into a dict, or read for one field)."""
    body: dict[str, Any] = json.loads(response.data)
    return body


class Watch:
    """One watch request of a list call (`call(*args)`, such as `CustomObjectsApi.list_namespaced_custom_object`):
    its events as the API server sent them, each decoded once. The kubernetes client's own Watch decodes every event
    twice and encodes it once more, to build a typed object beside the raw one; the webhook's informers paid that
    on every create of a cached kind.

    `resource_version` follows every event and bookmark: a watch that ends (the server's timeout, or the caller
    leaving the loop) resumes from it. An ERROR event raises ApiException with its code (410: the version is too
    old, list again)."""

    def __init__(self, resource_version: str = "") -> None:
        self.resource_version = resource_version  # "": from now, after an ADDED for each object there is

    def events(
        self, call: Callable[..., Any], *args: Any, timeout_seconds: int, **kwargs: Any
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) for each ADDED, MODIFIED and DELETED until the server ends the watch."""
        response = call(
            *args,
            **kwargs,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version or None,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
        )
        try:
            pending = b""
            for chunk in response.stream(amt=None, decode_content=False):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield from self._decoded(json.loads(line))
        finally:
            response.close()
            response.release_conn()

    def _decoded(self, event: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        kind, obj = event["type"], event["object"]
        if kind == "ERROR":
            raise client.ApiException(status=obj.get("code", 500), reason=f"{obj.get('reason')}: {obj.get('message')}")
        self.resource_version = str(obj["metadata"]["resourceVersion"])
        if kind != "BOOKMARK":
            yield kind, obj


def is_conflict(error: BaseException) -> bool:
    return isinstance(error, client.ApiException) and error.status == 409


def is_not_found(error: BaseException) -> bool:
    return isinstance(error, client.ApiException) and error.status == 404


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """An Event's `involvedObject` for `obj`: its apiVersion, kind, name, namespace and uid (those it has)."""
    meta = obj.get("metadata") or {}
    reference = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }
    return {key: str(value) for key, value in reference.items() if value}
