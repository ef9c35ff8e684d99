"""`epicctl proxy-status` and `proxy-config` as pure functions of what the xds replicas' debug APIs answered.

Each replica answers `/debug/envoys` with one entry per Envoy stream (tollgate.xds.api.debug.sync_status): per type,
the version and nonce sent and ACKed, when, and the last NACK. Per type an Envoy is

- SYNCED: it ACKed the latest response, and no source is held back on it for that type;
- NACKED: it rejected a response (Envoy's error is shown), or a source stays held back after it rejected it;
- STALE: a response is unanswered for longer than the threshold (`--stale-after`);
- PENDING: a response is unanswered, for less than the threshold;
- NOT SENT: the Envoy did not ask for that type (yet).
"""

from __future__ import annotations

from typing import Any

from tollgate.cli.render import Row, compact_duration

JSON = dict[str, Any]

SYNCED, NACKED, STALE, PENDING, NOT_SENT = "SYNCED", "NACKED", "STALE", "PENDING", "NOT SENT"
# The debug API's type names, and the columns istioctl's users know them by.
TYPES = {"clusters": "cds", "listeners": "lds", "endpoints": "eds"}
STATUS_COLUMNS = (["name", "serves", "cds", "lds", "eds", "xds", "last-ack"], ["api", "versions", "error"])
DEFAULT_STALE_AFTER = 30.0


def type_state(entry: JSON, now: float, stale_after: float) -> tuple[str, str]:
    """One type's state and, when NACKED, Envoy's error."""
    nack = entry.get("nack")
    held = entry.get("held_back") or {}
    if nack:
        return NACKED, str(nack.get("message", ""))
    if held:
        return NACKED, "; ".join(f"{owner}: {message}" for owner, message in sorted(held.items()))
    if not entry.get("subscribed"):
        return NOT_SENT, ""
    if entry.get("pending"):
        sent_at = entry.get("sent_at")
        late = sent_at is not None and now - float(sent_at) > stale_after
        return (STALE if late else PENDING), ""
    return SYNCED, ""


def duration(seconds: float | None) -> str:
    """A duration as kubectl prints ages (42s, 7m, 3h, 12d); `never` for None."""
    return "never" if seconds is None else compact_duration(seconds)


def serves(envoy: JSON) -> str:
    """What the Envoy serves: its LoadBalancers and VirtualServices ("LoadBalancer ns/name", ...), `-` when none."""
    sources = [str(s) for s in envoy.get("sources") or []]
    return ",".join(sources) or "-"


def envoy_status(envoy: JSON, now: float, stale_after: float) -> JSON:
    """One Envoy stream as `-o json|yaml` shows it: who, served by which replica, and each type's state."""
    server_now = float(envoy.get("server_time") or now)
    types: JSON = {}
    for name, entry in sorted((envoy.get("types") or {}).items()):
        state, error = type_state(entry, server_now, stale_after)
        acked_at = entry.get("acked_at")
        types[name] = {
            "state": state,
            "error": error or None,
            "sentVersion": entry.get("sent_version", ""),
            "sentNonce": entry.get("sent_nonce", ""),
            "ackedVersion": entry.get("acked_version", ""),
            "ackedNonce": entry.get("acked_nonce", ""),
            "secondsSinceAck": None if acked_at is None else max(0.0, server_now - float(acked_at)),
        }
    acks = [t["secondsSinceAck"] for t in types.values() if t["secondsSinceAck"] is not None]
    return {
        "name": envoy.get("node", ""),
        "pod": envoy.get("pod", ""),
        "namespace": envoy.get("namespace", ""),
        "serves": list(envoy.get("sources") or []),
        "xds": envoy.get("replica", ""),
        "api": envoy.get("api", ""),
        "connection": envoy.get("connection"),
        "secondsSinceAck": min(acks) if acks else None,
        "types": types,
    }


def status_rows(statuses: list[JSON]) -> list[Row]:
    rows = []
    for status in sorted(statuses, key=lambda s: (s["name"], str(s["xds"]))):
        types = status["types"]
        row: Row = {
            "name": status["name"],
            "serves": ",".join(status["serves"]) or "-",
            "xds": status["xds"] or "-",
            "last-ack": duration(status["secondsSinceAck"]),
            "api": status["api"],
        }
        for name, column in TYPES.items():
            row[column] = types[name]["state"] if name in types else NOT_SENT
        row["versions"] = " ".join(
            f"{TYPES.get(n, n)}={t['sentVersion'] or '-'}/{t['ackedVersion'] or '-'}" for n, t in sorted(types.items())
        )
        row["error"] = "; ".join(f"{TYPES.get(n, n)}: {t['error']}" for n, t in sorted(types.items()) if t["error"])
        rows.append(row)
    return rows


# --- proxy-config ---------------------------------------------------------------------------------------------

CONFIG_COLUMNS = {
    "listeners": ["name", "address", "port", "protocol", "destination"],
    "clusters": ["name", "type", "endpoints", "lb-policy"],
    "endpoints": ["cluster", "endpoint", "weight", "health"],
}


def _socket(address: JSON) -> JSON:
    return dict((address or {}).get("socket_address") or {})


def _clusters_named(node: Any) -> list[str]:
    """Every `cluster` a filter config routes to, wherever it sits (a UDP proxy's matcher, a TCP proxy, a route)."""
    if isinstance(node, dict):
        found = [str(v) for k, v in node.items() if k == "cluster" and isinstance(v, str)]
        return found + [
            c for k, v in node.items() if k != "cluster" or not isinstance(v, str) for c in _clusters_named(v)
        ]
    if isinstance(node, list):
        return [c for item in node for c in _clusters_named(item)]
    return []


def _listener_destination(listener: JSON) -> str:
    """The clusters a listener sends to, `-` when none."""
    filters = [*(listener.get("listener_filters") or [])]
    filters += [f for chain in listener.get("filter_chains") or [] for f in chain.get("filters") or []]
    found = _clusters_named([f.get("typed_config") or {} for f in filters])
    return ",".join(dict.fromkeys(found)) or "-"


def listener_rows(listeners: list[JSON]) -> list[Row]:
    rows = []
    for listener in listeners:
        socket = _socket(listener.get("address") or {})
        rows.append(
            {
                "name": str(listener.get("name", "")),
                "address": str(socket.get("address", "")),
                "port": str(socket.get("port_value", "")),
                "protocol": str(socket.get("protocol", "TCP")),
                "destination": _listener_destination(listener),
            }
        )
    return rows


def _lb_endpoints(assignment: JSON) -> list[JSON]:
    return [e for locality in assignment.get("endpoints") or [] for e in locality.get("lb_endpoints") or []]


def cluster_rows(clusters: list[JSON]) -> list[Row]:
    rows = []
    for cluster in clusters:
        inline = cluster.get("load_assignment")
        rows.append(
            {
                "name": str(cluster.get("name", "")),
                "type": str(cluster.get("type", "EDS" if "eds_cluster_config" in cluster else "STATIC")),
                "endpoints": str(len(_lb_endpoints(inline))) if inline else "eds",
                "lb-policy": str(cluster.get("lb_policy", "ROUND_ROBIN")),
            }
        )
    return rows


def endpoint_rows(assignments: list[JSON]) -> list[Row]:
    rows = []
    for assignment in assignments:
        for endpoint in _lb_endpoints(assignment):
            socket = _socket((endpoint.get("endpoint") or {}).get("address") or {})
            rows.append(
                {
                    "cluster": str(assignment.get("cluster_name", "")),
                    "endpoint": f"{socket.get('address', '')}:{socket.get('port_value', '')}",
                    "weight": str(endpoint.get("load_balancing_weight", 1)),
                    "health": str(endpoint.get("health_status", "UNKNOWN")),
                }
            )
    return rows


CONFIG_ROWS = {"listeners": listener_rows, "clusters": cluster_rows, "endpoints": endpoint_rows}
