"""Who an Envoy really is: the pod its node id names, checked against the pod cache and the connection's peer.

An Envoy's node id is `<pod>.<namespace>` (the allocator's Deployments pass `--service-node
$(POD_NAME).$(POD_NAMESPACE)`). A stream is admitted only when that pod exists, carries ENVOY_PROXY_LABEL=true,
and the gRPC peer's IP is one of the pod's IPs: a client cannot claim another pod's config by naming it. What
the Envoy says of itself in its node metadata (labels, pod name) is not trusted; its labels come from the pod.

`admit` is the pure decision; `Gate` waits briefly for a pod that is not in the cache yet (an Envoy may connect
before the pod's watch event arrives), counts and logs refusals, and hands them on (the service posts an Event).
"""

from __future__ import annotations

import asyncio
import contextlib
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
    """Who an admitted Envoy is: `<pod>.<namespace>`, the pod's labels, and where its listeners bind."""

    node_id: str
    namespace: str
    pod: str
    labels: ir.Labels
    listener_address: str = ANY_ADDRESS


@dataclass(frozen=True)
class Refusal:
    """Why a stream is refused: `reason` (a metric label, CamelCase), a message for the log, the client and the
    Event, and the pod the node id names when it exists (the Event goes on it)."""

    reason: str
    message: str
    node_id: str
    peer: str
    pod: Pod | None = None


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
    where = f"node id {node_id!r}: pod {namespace}/{name}"
    if dict(pod.labels).get(ENVOY_PROXY_LABEL) != "true":
        return Refusal("NotAnEnvoyPod", f"{where} is not labelled {ENVOY_PROXY_LABEL}=true", node_id, peer, pod)
    ip = peer_ip(peer)
    if ip is None or ip not in pod.ips:
        ips = ", ".join(pod.ips) or "none yet"
        message = f"{where} has IPs {ips}, and the connection comes from {ip or peer}"
        return Refusal("PeerMismatch", message, node_id, peer, pod)
    address = listener_address(node)
    if address != ANY_ADDRESS and address not in pod.ips:
        message = f"{where}: listener address {address} ({LISTENER_ADDRESS_KEY}) is not one of its IPs"
        return Refusal("ListenerAddressMismatch", message, node_id, peer, pod)
    return Identity(node_id, namespace, name, pod.labels, address)


class Gate:
    """Admission of ADS streams: `admit` waits up to `wait` seconds for the pod cache to show the pod as it must be
    (`pods_changed` wakes it), then refuses: a warning log, the `tollgate_xds_refused_streams_total` counter, and
    `on_refused`."""

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
            self._refused.add(1, {"reason": verdict.reason})
            log.warning(
                "ADS stream refused: %s",
                verdict.message,
                extra={"node": verdict.node_id, "peer": verdict.peer, "reason": verdict.reason},
            )
            if self.on_refused is not None:
                await self.on_refused(verdict)
        return verdict
