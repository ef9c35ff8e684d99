"""The debug HTTP API (FastAPI): per-Envoy sync status (sent vs ACKed, per type) and config dumps.

With a `Gatekeeper` (served beyond loopback), every request needs a token (tollgate.xds.api.auth): 401 without
one or with one the API server does not accept for the debug audience, 403 when its user lacks the permission."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException

from tollgate.xds import ir, resources
from tollgate.xds.api.auth import HEADER, Gatekeeper
from tollgate.xds.server import Connection, XdsServer
from tollgate.xds.status import envoy_names
from tollgate.xds.streams import TypeState


def _type_status(conn: Connection, state: TypeState) -> dict[str, Any]:
    desired = conn.stream.desired[state.type_url]
    nack = state.nack
    return {
        "subscribed": state.seen,
        "wildcard": state.wildcard,
        "names": sorted(state.names),
        "desired_version": str(conn.stream.generation[state.type_url]),
        "desired_resources": len(desired),
        "sent_version": state.sent_version,
        "sent_nonce": state.last_nonce,
        "acked_version": state.acked_version,
        "acked_nonce": state.acked_nonce,
        "acked_resources": len(state.acked),
        "pending": state.pending is not None,
        "pushes": state.pushes,
        "sent_at": state.sent_at,
        "acked_at": state.acked_at,
        "nack": None
        if nack is None
        else {"version": nack.version, "nonce": nack.nonce, "message": nack.message, "at": nack.at},
        "held_back": {
            str(owner): rejection.message
            for (owner, type_url), rejection in sorted(conn.stream.rejected.items())
            if type_url == state.type_url
        },
    }


def _envoy_names(config: ir.ProxyConfig) -> dict[str, list[dict[str, Any]]]:
    """The Envoy names of the VirtualService listeners and clusters served to this Envoy, by VirtualService."""
    units: dict[str, list[ir.Listener]] = defaultdict(list)
    for ref, unit in config.units:
        if ref.kind == "VirtualService":
            units[str(ref)].append(unit)
    return {source: [names.to_wire() for names in envoy_names(found)] for source, found in units.items()}


def sync_status(conn: Connection, replica: str = "") -> dict[str, Any]:
    identity = conn.identity
    return {
        "node": identity.node_id,
        "replica": replica,
        "server_time": time.time(),
        "pod": identity.pod,
        "namespace": identity.namespace,
        "labels": dict(conn.proxy.labels if conn.proxy else identity.labels),
        "listener_address": identity.listener_address,
        "api": conn.api,
        "connection": conn.id,
        "connected_at": conn.connected_at,
        "in_sync": conn.stream.in_sync(),
        "sources": [str(ref) for ref in conn.config.sources],
        "conflicts": [c.message_for(c.loser) for c in conn.config.conflicts],
        "envoy_names": _envoy_names(conn.config),
        "types": {
            resources.SHORT_NAMES[type_url]: _type_status(conn, state) for type_url, state in conn.stream.types.items()
        },
    }


def create_app(server: XdsServer, gatekeeper: Gatekeeper | None = None, replica: str = "") -> FastAPI:
    """The debug API of `server`, whose answers name it `replica`; every request checked by `gatekeeper` if any."""

    def authorised(token: Annotated[str | None, Header(alias=HEADER)] = None) -> None:
        if gatekeeper is None:
            return
        decision = gatekeeper.check(token)
        if decision.status != 200:
            raise HTTPException(decision.status, decision.message)

    app = FastAPI(
        title="tollgate-xds debug",
        description="What each Envoy was sent and has ACKed.",
        dependencies=[Depends(authorised)],
    )

    def connections(node: str) -> list[Connection]:
        found = [c for c in server.connections.values() if c.identity.node_id == node]
        if not found:
            raise HTTPException(404, f"no Envoy with node id {node!r} is connected")
        return found

    @app.get("/debug/envoys")
    def envoys() -> list[dict[str, Any]]:
        """Sync status of every connected Envoy."""
        found = sorted(server.connections.values(), key=lambda c: c.identity.node_id)
        return [sync_status(c, replica) for c in found]

    @app.get("/debug/envoys/{node}")
    def envoy(node: str) -> list[dict[str, Any]]:
        """Sync status of one Envoy (one entry per open stream)."""
        return [sync_status(c, replica) for c in connections(node)]

    @app.get("/debug/envoys/{node}/config_dump")
    def config_dump(node: str) -> dict[str, Any]:
        """What this Envoy should have: its resources by type, as Envoy's own config dump shows them."""
        conn = connections(node)[-1]
        return {
            "node": node,
            "replica": replica,
            "versions": {resources.SHORT_NAMES[t]: str(v) for t, v in conn.stream.generation.items()},
            **resources.dump(conn.stream.desired),
        }

    @app.get("/debug/envoys/{node}/sent")
    def sent(node: str) -> dict[str, Any]:
        """What this Envoy was last sent, by type: the response it is answering, else the last it ACKed (a rejected
        response is not shown: the Envoy kept its previous config). What `epicctl proxy-config` shows."""
        conn = connections(node)[-1]
        return {
            "node": node,
            "replica": replica,
            "versions": {resources.SHORT_NAMES[t]: s.sent_version for t, s in conn.stream.types.items()},
            **resources.dump(
                {t: {n: r for n, r in s.sent.items() if r.data is not None} for t, s in conn.stream.types.items()}
            ),
        }

    @app.get("/debug/convergence")
    def convergence() -> dict[str, Any]:
        """Convergence times (change observed to every affected Envoy ACKing) of the latest changes, and how many
        changes still wait for an Envoy's answer."""
        samples = sorted(server.convergence)
        if not samples:
            return {"count": 0, "outstanding": server.outstanding}
        quantiles = statistics.quantiles(samples, n=100) if len(samples) > 1 else [samples[0]] * 99
        return {
            "count": len(samples),
            "p50": quantiles[49],
            "p99": quantiles[98],
            "max": samples[-1],
            "outstanding": server.outstanding,
        }

    return app
