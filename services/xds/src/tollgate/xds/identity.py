"""Who an Envoy really is: the pod its node id names, checked against the pod cache and the connection's peer.

An Envoy's node id is `<pod>.<namespace>` (the allocator's Deployments pass `--service-node
$(POD_NAME).$(POD_NAMESPACE)`). A stream is admitted only when that pod exists, carries ENVOY_PROXY_LABEL=true,
and the gRPC peer's IP is one of the pod's IPs: a client cannot claim another pod's config by naming it. What
the Envoy says of itself in its node metadata (labels, pod name) is not trusted; its labels come from the pod.

An admitted stream stays bound to its pod: `revoked` judges it again whenever the pod changes, and the stream is
ended once the pod is deleted or replaced, loses the label, or no longer has the address the stream comes from; the
Envoy's reconnect is then judged afresh.

`admit` and `revoked` are the pure decisions; `Gate` waits briefly for a pod that is not in the cache yet (an Envoy
may connect before the pod's watch event arrives), counts and logs refusals and revocations, and hands them on (the
service posts an Event).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from envoy.config.core.v3 import base_pb2
from google.protobuf import json_format
from opentelemetry import metrics

from tollgate.models.envoy import ENVOY_PROXY_LABEL, LISTENER_ADDRESS_KEY
from tollgate.xds import ir
from tollgate.xds import metrics as xds_metrics
from tollgate.xds.translate import Pod

log = logging.getLogger("tollgate.xds.identity")
ANY_ADDRESS = "0.0.0.0"
# How long a stream whose pod is not (yet) as it should be waits for the pod cache before it is refused.
DEFAULT_WAIT = 2.0


@dataclass(frozen=True)
class Identity:
    """Who an admitted Envoy is: `<pod>.<namespace>`, the pod's labels, where its listeners bind, and what it was
    admitted on: the connection's peer and the pod's uid."""

    node_id: str
    namespace: str
    pod: str
    labels: ir.Labels
    listener_address: str = ANY_ADDRESS
    peer: str = ""
    pod_uid: str = ""


@dataclass(frozen=True)
class Refusal:
    """Why a stream is refused (or, `revoked`, ended after it was admitted): `reason` (a metric label, CamelCase),
    a message for the log, the client and the Event, and the pod the node id names when it exists (the Event goes on
    it)."""

    reason: str
    message: str
    node_id: str
    peer: str
    pod: Pod | None = None
    revoked: bool = False


def pod_key(node_id: str) -> tuple[str, str] | None:
    """(namespace, pod) of a node id `<pod>.<namespace>`; None when it is not of that form (a namespace has no
    dot, a pod name may)."""
    pod, dot, namespace = node_id.rpartition(".")
    return (namespace, pod) if dot and pod and namespace else None


def peer_ip(peer: str) -> str | None:
    """The IP of a grpcio peer (`ipv4:10.1.2.3:5000`, `ipv6:[::1]:5000`, percent-encoded or not), a v4-mapped IPv6
    address as IPv4; None for any other transport (`unix:...`)."""
    kind, _, rest = urllib.parse.unquote(peer).partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host = rest.rpartition(":")[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def listener_address(node: base_pb2.Node) -> str:
    """The address the Envoy asks its listeners to bind (LISTENER_ADDRESS_KEY in its node metadata), else 0.0.0.0."""
    metadata: dict[str, Any] = json_format.MessageToDict(node.metadata) if node.HasField("metadata") else {}
    return str(metadata.get(LISTENER_ADDRESS_KEY) or ANY_ADDRESS)


def admit(node: base_pb2.Node, peer: str, pods: Callable[[str, str], Pod | None]) -> Identity | Refusal:
    """The Envoy's identity when the pod its node id names exists, is an Envoy proxy pod, and has the peer's IP
    (and the listener address asked for, if any); otherwise why not."""
    node_id = node.id
    key = pod_key(node_id)
    if key is None:
        return Refusal("InvalidNodeId", f"node id {node_id!r} is not <pod>.<namespace>", node_id, peer)
    namespace, name = key
    pod = pods(namespace, name)
    if pod is None:
        return Refusal("PodNotFound", f"node id {node_id!r}: no pod {namespace}/{name}", node_id, peer)
    return _judge(node_id, pod, peer, listener_address(node))


def revoked(identity: Identity, pods: Callable[[str, str], Pod | None]) -> Refusal | None:
    """Why an admitted stream may be served no longer: its pod was deleted or replaced (another uid under the
    name), or no longer passes what `admit` checked; None while it does."""
    node_id, peer = identity.node_id, identity.peer
    where = f"node id {node_id!r}: pod {identity.namespace}/{identity.pod}"
    pod = pods(identity.namespace, identity.pod)
    if pod is None:
        return Refusal("PodDeleted", f"{where} was deleted", node_id, peer, revoked=True)
    if identity.pod_uid and pod.uid != identity.pod_uid:
        message = f"{where} was replaced (uid {identity.pod_uid} is now {pod.uid})"
        return Refusal("PodReplaced", message, node_id, peer, pod, revoked=True)
    verdict = _judge(node_id, pod, peer, identity.listener_address)
    return dataclasses.replace(verdict, revoked=True) if isinstance(verdict, Refusal) else None


def _judge(node_id: str, pod: Pod, peer: str, address: str) -> Identity | Refusal:
    where = f"node id {node_id!r}: pod {pod.namespace}/{pod.name}"
    if dict(pod.labels).get(ENVOY_PROXY_LABEL) != "true":
        return Refusal("NotAnEnvoyPod", f"{where} is not labelled {ENVOY_PROXY_LABEL}=true", node_id, peer, pod)
    ip = peer_ip(peer)
    if ip is None or ip not in pod.ips:
        ips = ", ".join(pod.ips) or "none yet"
        message = f"{where} has IPs {ips}, and the connection comes from {ip or peer}"
        return Refusal("PeerMismatch", message, node_id, peer, pod)
    if address != ANY_ADDRESS and address not in pod.ips:
        message = f"{where}: listener address {address} ({LISTENER_ADDRESS_KEY}) is not one of its IPs"
        return Refusal("ListenerAddressMismatch", message, node_id, peer, pod)
    return Identity(node_id, pod.namespace, pod.name, pod.labels, address, peer, pod.uid)


class Gate:
    """Admission of ADS streams: `admit` waits up to `wait` seconds for the pod cache to show the pod as it must be
    (`pods_changed` wakes it), then refuses: a warning log, the `tollgate_xds_refused_streams_total` counter, and
    `on_refused`. `recheck` judges an admitted stream again (`revoked`); `ended` records one ended that way (a log,
    `tollgate_xds_revoked_streams_total`, `on_refused`)."""

    def __init__(
        self,
        pods: Callable[[str, str], Pod | None],
        wait: float = DEFAULT_WAIT,
        meter: metrics.Meter | None = None,
        on_refused: Callable[[Refusal], Awaitable[None]] | None = None,
    ) -> None:
        self.pods = pods
        self.wait = wait
        self.on_refused = on_refused
        self._changed = asyncio.Event()
        meter = meter or metrics.get_meter("tollgate.xds")
        self._refused = xds_metrics.REFUSED_STREAMS.create(meter)
        self._revoked = xds_metrics.REVOKED_STREAMS.create(meter)

    def pods_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def admit(self, node: base_pb2.Node, peer: str) -> Identity | Refusal:
        deadline = time.monotonic() + self.wait
        while isinstance(verdict := admit(node, peer, self.pods), Refusal):
            left = deadline - time.monotonic()
            if left <= 0 or verdict.reason == "InvalidNodeId":
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        if isinstance(verdict, Refusal):
            await self._record(verdict)
        return verdict

    def recheck(self, identity: Identity) -> Refusal | None:
        return revoked(identity, self.pods)

    async def ended(self, refusal: Refusal) -> None:
        """An admitted stream ended: `refusal` is what `recheck` said."""
        await self._record(refusal)

    async def _record(self, refusal: Refusal) -> None:
        counter, what = (self._revoked, "ended") if refusal.revoked else (self._refused, "refused")
        counter.add(1, {"reason": refusal.reason})
        extra = {"node": refusal.node_id, "peer": refusal.peer, "reason": refusal.reason}
        log.warning("ADS stream %s: %s", what, refusal.message, extra=extra)
        if self.on_refused is not None:
            await self.on_refused(refusal)
