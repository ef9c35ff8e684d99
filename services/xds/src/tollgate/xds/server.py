"""The xDS server's state: connected Envoys, what each should have, debouncing, convergence and metrics.

The gRPC layer (grpc/ads.py) calls `connect`, `on_sotw_request`/`on_delta_request`, `pushed` and
`disconnect`; the kopf handlers change `world` and call `changed`; `run` recomputes what every Envoy should
have once changes stop arriving for `debounce` seconds, and wakes the streams whose content changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

from tollgate.models.addresses import DEFAULT_POLICY, EndpointPolicy
from tollgate.runtime.resync import Key
from tollgate.runtime.tracing import annotated_parent, link_to, parent_context
from tollgate.xds import ir, resources, translate
from tollgate.xds import metrics as xds_metrics
from tollgate.xds.identity import Identity, Refusal
from tollgate.xds.resources import DNS, SHORT_NAMES
from tollgate.xds.streams import Nack, Push, Stream
from tollgate.xds.world import World

log = logging.getLogger("tollgate.xds.server")
# Changes waited for (until every affected Envoy answers) at most; past it the oldest is given up on.
MAX_OUTSTANDING = 1000
# A source by kind, namespace and name: what its latest change's trace parent is kept under.
TraceKey = tuple[str, str, str]


@dataclass
class Connection:
    id: int
    identity: Identity
    stream: Stream
    connected_at: float = field(default_factory=time.time)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    proxy: ir.Proxy | None = None
    config: ir.ProxyConfig = field(default_factory=ir.ProxyConfig)
    spans: dict[str, trace.Span] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    # The trace parents of the source changes this Envoy's config already carries, by TraceKey; and those the next
    # pushes carry (the first is their parent, the others are linked).
    carried: dict[TraceKey, str] = field(default_factory=dict)
    push_parents: tuple[str, ...] = ()
    # The latest generation of each source this Envoy was seen to run (filled by the status reporter).
    programmed: dict[ir.SourceRef, int] = field(default_factory=dict)
    # Why the stream must end, once its pod no longer admits it (set by the ADS layer, which ends it).
    revoked: Refusal | None = None

    @property
    def api(self) -> str:
        return "delta" if self.stream.delta else "sotw"


@dataclass
class _Outstanding:
    observed: list[float]
    remaining: set[int]


class XdsServer:
    def __init__(
        self,
        dns: DNS | None = None,
        debounce: float = 0.05,
        meter: metrics.Meter | None = None,
        tracer: trace.Tracer | None = None,
        stream_class: type[Stream] = Stream,
        max_outstanding: int = MAX_OUTSTANDING,
        endpoint_policy: EndpointPolicy = DEFAULT_POLICY,
    ) -> None:
        self.world = World(endpoint_policy)
        self.dns = dns or DNS()
        self.cache = resources.ResourceCache(self.dns)
        self.debounce = debounce
        self.stream_class = stream_class
        self.connections: dict[int, Connection] = {}
        self.generations: dict[ir.SourceRef, int] = {}
        # The W3C traceparent of each source's latest change (its tollgate.io/trace-parent annotation).
        self.trace_parents: dict[TraceKey, str] = {}
        self.sources: list[ir.Source] = []
        self.convergence: deque[float] = deque(maxlen=10000)
        self.nacks: list[tuple[Connection, Nack]] = []
        self.status_dirty = asyncio.Event()
        self.on_converged: list[Callable[[float], None]] = []
        self.on_changed: list[Callable[[], None]] = []
        # Called at each recompute with the pods that changed since the last: the streams they admit are judged again.
        self.on_pods_changed: list[Callable[[set[Key]], None]] = []
        self._ids = count(1)
        self._changes: list[float] = []
        self._dirty = asyncio.Event()
        self._outstanding: list[_Outstanding] = []
        self.max_outstanding = max_outstanding
        meter = meter or metrics.get_meter("tollgate.xds")
        self.tracer = tracer or trace.get_tracer("tollgate.xds")
        self._connected = xds_metrics.CONNECTED_ENVOYS.create(meter)
        self._pushes = xds_metrics.PUSHES.create(meter)
        self._push_resources = xds_metrics.PUSHED_RESOURCES.create(meter)
        self._nacks = xds_metrics.NACKS.create(meter)
        self._convergence = xds_metrics.CONVERGENCE.create(meter)
        self._abandoned = xds_metrics.CONVERGENCE_ABANDONED.create(meter)

    @property
    def outstanding(self) -> int:
        """Changes still waiting for some affected Envoy to answer."""
        return len(self._outstanding)

    # --- changes --------------------------------------------------------------------------------------------

    def traced(self, kind: ir.SourceKind, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """Keep the trace parent of a source's change: the pushes that carry it to an Envoy continue its trace."""
        meta = obj.get("metadata") or {}
        key = (kind, meta.get("namespace", ""), meta.get("name", ""))
        parent = None if deleted else annotated_parent(obj)
        if parent is None:
            self.trace_parents.pop(key, None)
        else:
            self.trace_parents[key] = parent

    def changed(self) -> None:
        """Something in `world` changed: recompute after the debounce delay."""
        self._changes.append(time.monotonic())
        self._dirty.set()
        for callback in self.on_changed:
            callback()

    async def run(self, stop: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                dirty = asyncio.ensure_future(self._dirty.wait())
                await asyncio.wait({dirty, stopping}, return_when=asyncio.FIRST_COMPLETED)
                dirty.cancel()
                if stop.is_set():
                    return
                await asyncio.sleep(self.debounce)
                self._dirty.clear()
                self.recompute()
        finally:
            stopping.cancel()

    def recompute(self) -> set[int]:
        """Recompute every Envoy's resources; wake and return the connections whose content changed."""
        observed, self._changes = self._changes, []
        pods = self.world.take_changed_pods()
        for callback in self.on_pods_changed if pods else ():
            callback(pods)
        with self.tracer.start_as_current_span("xds.recompute") as span:
            self.sources = self.world.sources()
            self.generations = {s.ref: s.generation for s in self.sources}
            self.cache.prune(self.generations)
            configs: dict[tuple[str, ir.Labels], ir.ProxyConfig] = {}
            affected = {conn.id for conn in self.connections.values() if self._refresh(conn, configs)}
            span.set_attribute("xds.envoys.affected", len(affected))
        if affected and observed:
            self._outstanding.append(_Outstanding(observed, affected))
            if len(self._outstanding) > self.max_outstanding:
                dropped = self._outstanding.pop(0)
                self._abandoned.add(len(dropped.observed))
                log.warning(
                    "more than %d changes wait for Envoys to answer: the oldest is no longer waited for",
                    self.max_outstanding,
                    extra={"envoys": sorted(dropped.remaining)},
                )
        self.status_dirty.set()
        for conn_id in affected:
            self.connections[conn_id].wake.set()
        self._settle()
        return affected

    def _refresh(self, conn: Connection, configs: dict[tuple[str, ir.Labels], ir.ProxyConfig] | None = None) -> bool:
        """Recompute one Envoy's resources; `configs` shares the work between Envoys with the same pod labels."""
        identity = conn.identity
        labels = self.world.pod_labels(identity.namespace, identity.pod)
        proxy = conn.proxy = ir.Proxy(
            node_id=identity.node_id,
            namespace=identity.namespace,
            pod=identity.pod,
            labels=identity.labels if labels is None else labels,
            listener_address=identity.listener_address,
        )
        configs = {} if configs is None else configs
        shared = configs.get((proxy.namespace, proxy.labels))
        if shared is None:
            shared = configs[(proxy.namespace, proxy.labels)] = translate.proxy_config(proxy, self.sources)
        config = shared
        if shared.conflicts and shared.conflicts[0].proxy != proxy.node_id:
            config = dataclasses.replace(
                shared, conflicts=tuple(dataclasses.replace(c, proxy=proxy.node_id) for c in shared.conflicts)
            )
        if config == conn.config:
            return False
        conn.config = config
        if not conn.stream.set_desired(self.cache.proxy(config, identity.listener_address)):
            return False
        conn.push_parents = self._new_traces(conn, config)
        return True

    def _new_traces(self, conn: Connection, config: ir.ProxyConfig) -> tuple[str, ...]:
        """The trace parents of the changes to `config`'s sources that this Envoy has not been sent yet."""
        new = []
        for ref in config.sources:
            key = (ref.kind, ref.namespace, ref.name)
            parent = self.trace_parents.get(key)
            if parent is not None and conn.carried.get(key) != parent:
                conn.carried[key] = parent
                new.append(parent)
        return tuple(new)

    # --- streams --------------------------------------------------------------------------------------------

    def connect(self, identity: Identity, delta: bool) -> Connection:
        """An admitted Envoy's stream (tollgate.xds.identity checked who it is)."""
        conn = Connection(next(self._ids), identity, self.stream_class(delta))
        self.connections[conn.id] = conn
        self._refresh(conn)
        self._connected.add(1, {"api": conn.api})
        self.status_dirty.set()
        log.info("Envoy connected", extra={"node": conn.identity.node_id, "api": conn.api, "connection": conn.id})
        return conn

    def disconnect(self, conn: Connection) -> None:
        conn.closed = True
        if self.connections.pop(conn.id, None) is None:
            return
        for span in conn.spans.values():
            span.set_status(trace.StatusCode.ERROR, "stream closed before the Envoy answered")
            span.end()
        self._connected.add(-1, {"api": conn.api})
        self.status_dirty.set()
        self._settle()
        log.info("Envoy disconnected", extra={"node": conn.identity.node_id, "connection": conn.id})

    def pushed(self, conn: Connection, push: Push) -> None:
        kind = SHORT_NAMES[push.type_url]
        attributes = {"type": kind, "api": conn.api}
        self._pushes.add(1, attributes)
        self._push_resources.add(len(push.resources), attributes)
        # In the trace of the change it carries (tollgate.runtime.tracing); a root span when none is known.
        parents = conn.push_parents
        conn.versions[push.type_url] = push.version
        conn.spans[push.type_url] = self.tracer.start_span(
            "xds.push",
            parent_context(parents[0]) if parents else otel_context.Context(),
            links=[link for parent in parents[1:] for link in link_to(parent)],
            attributes={
                "xds.node": conn.identity.node_id,
                "xds.type": kind,
                "xds.version": push.version,
                "xds.nonce": push.nonce,
                "xds.resources": len(push.resources),
                "xds.removed": len(push.removed),
            },
        )

    def on_sotw_request(self, conn: Connection, type_url: str, nonce: str, names: list[str], error: str | None) -> None:
        self._answered(conn, type_url, conn.stream.on_sotw_request(type_url, nonce, names, error))

    def on_delta_request(
        self,
        conn: Connection,
        type_url: str,
        nonce: str,
        subscribe: list[str],
        unsubscribe: list[str],
        initial: dict[str, str],
        error: str | None,
    ) -> None:
        result = conn.stream.on_delta_request(type_url, nonce, subscribe, unsubscribe, initial, error)
        self._answered(conn, type_url, result)

    def _answered(self, conn: Connection, type_url: str, result: Nack | bool | None) -> None:
        if result is not None:
            span = conn.spans.pop(type_url, None)
            if isinstance(result, Nack):
                self._nacks.add(1, {"type": SHORT_NAMES[type_url], "api": conn.api})
                self.nacks.append((conn, result))
                log.warning(
                    "Envoy rejected %s version %s: %s",
                    SHORT_NAMES[type_url],
                    result.version,
                    result.message,
                    extra={"node": conn.identity.node_id},
                )
                if span is not None:
                    span.set_status(trace.StatusCode.ERROR, result.message)
            if span is not None:
                self._record_answer(conn, type_url, span, result)
                span.end()
            self.status_dirty.set()
            self._settle(conn)
        conn.wake.set()

    def _record_answer(self, conn: Connection, type_url: str, push: trace.Span, result: Nack | bool) -> None:
        """The Envoy's ACK (or NACK) of a push: a span of its own, a child of the push's."""
        answer = self.tracer.start_span(
            "xds.nack" if isinstance(result, Nack) else "xds.ack",
            trace.set_span_in_context(push),
            attributes={
                "xds.node": conn.identity.node_id,
                "xds.type": SHORT_NAMES[type_url],
                "xds.version": conn.versions.get(type_url, ""),
            },
        )
        if isinstance(result, Nack):
            answer.set_status(trace.StatusCode.ERROR, result.message)
        answer.end()

    def _settle(self, answered: Connection | None = None) -> None:
        """Record the convergence of every change whose affected Envoys have all ACKed or rejected it.

        After one Envoy's answer only that Envoy is checked; otherwise every Envoy still waited for.
        """
        if not self._outstanding:
            return
        if answered is not None and not answered.stream.settled():
            return
        now = time.monotonic()
        still: list[_Outstanding] = []
        for outstanding in self._outstanding:
            if answered is not None:
                outstanding.remaining.discard(answered.id)
            else:
                outstanding.remaining = {
                    c
                    for c in outstanding.remaining
                    if c in self.connections and not self.connections[c].stream.settled()
                }
            if outstanding.remaining:
                still.append(outstanding)
                continue
            for observed in outstanding.observed:
                seconds = now - observed
                self.convergence.append(seconds)
                self._convergence.record(seconds)
                for callback in self.on_converged:
                    callback(seconds)
        self._outstanding = still
