"""What the process-backed pods share, the Envoy supervisor's and the embedded kubelet's: a container's
environment as a kubelet computes it, the pod-status patch, and the list-then-watch of a kind."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from tollgate.runtime.kube import Watch, raw_json

log = logging.getLogger("tollgate.testing.pods")
JSON = dict[str, Any]
# (kind, name) -> the object's data (a Secret's decoded), or None when the object does not exist.
Lookup = Callable[[str, str], Mapping[str, str] | None]


class EnvError(ValueError):
    """A container's env cannot be built (a missing, non-optional Secret or ConfigMap key)."""


# $$ is a literal $; $(NAME) is NAME's value when NAME is defined, else left as written (Kubernetes' rules).
_VAR = re.compile(r"\$\$|\$\(([^()$]*)\)")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")
_FIELD_PATHS: dict[str, Callable[[JSON], Any]] = {
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"]["namespace"],
    "metadata.uid": lambda pod: pod["metadata"]["uid"],
    "spec.nodeName": lambda pod: pod["spec"].get("nodeName", ""),
    "spec.serviceAccountName": lambda pod: pod["spec"].get("serviceAccountName", ""),
    "status.podIP": lambda pod: pod["status"].get("podIP", ""),
    "status.hostIP": lambda pod: pod["status"].get("hostIP", ""),
    "status.podIPs": lambda pod: ",".join(ip["ip"] for ip in pod["status"].get("podIPs", [])),
    "status.hostIPs": lambda pod: ",".join(ip["ip"] for ip in pod["status"].get("hostIPs", [])),
}


def expand(text: str, env: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR.sub(substitute, text)


def field_value(pod: JSON, path: str) -> str | None:
    """The downward API: the value of `path` in `pod`, None for a path it does not know."""
    if path in _FIELD_PATHS:
        return str(_FIELD_PATHS[path](pod))
    if match := _SUBSCRIPT.match(path):
        return str(pod["metadata"].get(match.group(1), {}).get(match.group(2), ""))
    return None


def decoded(secret: JSON) -> dict[str, str]:
    """A Secret's data, base64-decoded (stringData never comes back from the API server)."""
    return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}


def _key_ref(ref: JSON, kind: str, lookup: Lookup) -> str | None:
    data = lookup(kind, ref["name"])
    if data is None or ref["key"] not in data:
        if ref.get("optional"):
            return None
        if data is None:
            raise EnvError(f'{kind.lower()} "{ref["name"]}" not found')
        raise EnvError(f"couldn't find key {ref['key']} in {kind} {ref['name']}")
    return data[ref["key"]]


def _env_from(container: JSON, lookup: Lookup) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        kind, ref = ("Secret", source["secretRef"]) if "secretRef" in source else ("ConfigMap", source["configMapRef"])
        data = lookup(kind, ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise EnvError(f'couldn\'t find {kind} "{ref["name"]}"')
        env.update({source.get("prefix", "") + key: value for key, value in data.items()})
    return env


def container_env(
    pod: JSON, container: JSON, lookup: Lookup | None = None, service_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The container's env as the kubelet sets it: envFrom, then env in order, each value expanded against what
    came before it (and `service_env`). Without `lookup`, Secret and ConfigMap references are left out."""
    env = _env_from(container, lookup) if lookup is not None else {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, source["fieldRef"]["fieldPath"])
        elif lookup is not None and "secretKeyRef" in source:
            value = _key_ref(source["secretKeyRef"], "Secret", lookup)
        elif lookup is not None and "configMapKeyRef" in source:
            value = _key_ref(source["configMapKeyRef"], "ConfigMap", lookup)
        elif not source:
            value = expand(var.get("value", ""), {**(service_env or {}), **env})
        else:
            value = None
        if value is not None:
            env[var["name"]] = value
    return env


def condition(kind: str, status: bool, reason: str, message: str, since: str) -> JSON:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


async def patch_pod_status(core: client.CoreV1Api, pod: JSON, status: JSON) -> None:
    """Strategic-merge `status` into the pod's status (conditions and containerStatuses merge by type and name);
    a pod that is already gone is not an error."""
    meta = pod["metadata"]
    try:
        await asyncio.to_thread(core.patch_namespaced_pod_status, meta["name"], meta["namespace"], {"status": status})
    except client.ApiException as error:
        if error.status != 404:
            log.warning("cannot update status of %s/%s: %s", meta["namespace"], meta["name"], error.reason)


class Watches:
    """List-then-watch threads (the kubernetes client is synchronous), each feeding one asyncio queue with
    (source, event type, object); a "LIST" event carries the whole list, for resyncing."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, str, JSON]] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()

    def start(self, source: str, list_call: Callable[..., Any], **options: Any) -> None:
        """Watch with `list_call` (a list_*_for_all_namespaces method) and `options` (e.g. label_selector)."""
        threading.Thread(target=self._run, args=(source, list_call, options), daemon=True).start()

    async def next(self, stop: asyncio.Event) -> tuple[str, str, JSON] | None:
        """The next event, or None once `stop` is set."""
        getter = asyncio.ensure_future(self._queue.get())
        stopper = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if getter not in done:
            getter.cancel()
            return None
        return getter.result()

    def close(self) -> None:
        self._stop.set()

    def _emit(self, source: str, kind: str, obj: JSON) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (source, kind, obj))

    def _run(self, source: str, list_call: Callable[..., Any], options: dict[str, Any]) -> None:
        while not self._stop.is_set():
            try:
                body = raw_json(list_call(_preload_content=False, **options))
                self._emit(source, "LIST", body)
                # An ERROR event (e.g. 410 Gone: the resourceVersion is too old) raises, and the list starts again.
                watcher = Watch(body["metadata"]["resourceVersion"])
                for kind, obj in watcher.events(list_call, timeout_seconds=30, **options):
                    self._emit(source, kind, obj)
                    if self._stop.is_set():
                        return
            except Exception as error:  # whatever went wrong, start again from a fresh list
                log.warning("watch of %s failed, relisting: %s", source, error)
                self._stop.wait(1)
