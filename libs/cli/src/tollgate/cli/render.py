"""What epicctl prints, as pure functions of the objects it read: rows, tables, descriptions, names, versions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tollgate.models.base import ResourceInfo, condition_status, parse_rfc3339
from tollgate.models.epic import account_of

JSON = dict[str, Any]
Row = dict[str, str]

# The columns of each listing: those of `-o table`, then those `-o wide` adds.
ACCOUNT_COLUMNS = (["name", "namespace", "ready", "age"], ["display-name", "service-ids", "lb-limit", "proxy-limit"])
LB_COLUMNS = (
    ["account", "name", "service-id", "address", "ports", "group", "tunnels", "ready", "age"],
    ["replicas", "clusters", "reason"],
)
TUNNEL_COLUMNS = (
    ["account", "load-balancer", "node", "tunnel-id", "epic-address", "epic-port"],
    ["service-id", "public-address"],
)
ENDPOINT_COLUMNS = (
    ["account", "load-balancer", "name", "endpoint", "port-name", "node", "tunnel-id", "ready"],
    ["cluster", "reason", "age"],
)
VERSION_COLUMNS = ["component", "version", "image", "namespace", "ready"]
# The services whose versions `epicctl version` reports: each is chart `tollgate-<name>`, its Deployment labelled so.
COMPONENTS = ("allocator", "xds", "routedip", "jobs", "webhook")
NOT_INSTALLED = "not installed"


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's compact age: 42s, 7m, 3h, 12d."""
    then = parse_rfc3339(timestamp)
    if then is None:
        return "<unknown>"
    return compact_duration(((now or datetime.now(UTC)) - then).total_seconds())


def compact_duration(elapsed: float) -> str:
    """kubectl's compact form of a duration: 42s, 7m, 3h, 12d."""
    seconds = max(0, int(elapsed))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(rows: Sequence[Row], columns: Sequence[str]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    widths = {c: max([len(c), *(len(r.get(c, "")) for r in rows)]) for c in columns}
    lines = ["   ".join(c.upper().ljust(widths[c]) for c in columns).rstrip()]
    lines += ["   ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def columns(listing: tuple[list[str], list[str]], wide: bool) -> list[str]:
    narrow, extra = listing
    return [*narrow, *extra] if wide else narrow


def ready_reason(obj: JSON) -> str:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    return str(found[0].get("reason", "")) if found else ""


def account_rows(accounts: list[JSON]) -> list[Row]:
    rows = []
    for a in accounts:
        spec, status = a.get("spec") or {}, a.get("status") or {}
        rows.append(
            {
                "name": a["metadata"]["name"],
                "namespace": a["metadata"]["namespace"],
                "ready": condition_status(a, "Ready"),
                "age": age(a["metadata"].get("creationTimestamp")),
                "display-name": str(spec.get("display-name") or ""),
                "service-ids": str(status.get("current-service-id", "")),
                "lb-limit": str(spec.get("loadBalancerLimit", "")),
                "proxy-limit": str(spec.get("proxyLimit", "")),
            }
        )
    return rows


def lb_rows(lbs: list[JSON]) -> list[Row]:
    rows = []
    for lb in lbs:
        spec, status = lb.get("spec") or {}, lb.get("status") or {}
        ports = ",".join(f"{p['port']}/{p.get('protocol', 'TCP')}" for p in spec.get("public-ports") or [])
        rows.append(
            {
                "account": account_of(lb["metadata"]["namespace"]),
                "name": lb["metadata"]["name"],
                "service-id": str(spec.get("service-id", "")),
                "address": str(spec.get("public-address", "")),
                "ports": ports,
                "group": str(spec.get("service-group", "")),
                "tunnels": str(len(status.get("gue-tunnel-endpoints") or {})),
                "ready": condition_status(lb, "Ready"),
                "age": age(lb["metadata"].get("creationTimestamp")),
                "replicas": str(spec.get("envoy-replica-count", "")),
                "clusters": ",".join(status.get("upstream-clusters") or []),
                "reason": ready_reason(lb),
            }
        )
    return rows


def tunnel_rows(lbs: list[JSON]) -> list[Row]:
    rows = []
    for lb in lbs:
        spec = lb.get("spec") or {}
        for node, entry in sorted(((lb.get("status") or {}).get("gue-tunnel-endpoints") or {}).items()):
            port = entry.get("epic-port") or {}
            rows.append(
                {
                    "account": account_of(lb["metadata"]["namespace"]),
                    "load-balancer": lb["metadata"]["name"],
                    "node": node,
                    "tunnel-id": str(entry.get("tunnel-id", "")),
                    "epic-address": str(entry.get("epic-address", "")),
                    "epic-port": f"{port.get('port', '')}/{port.get('protocol', '')}",
                    "service-id": str(spec.get("service-id", "")),
                    "public-address": str(spec.get("public-address", "")),
                }
            )
    return sorted(rows, key=lambda r: int(r["tunnel-id"] or 0))


def endpoint_rows(reps: list[JSON]) -> list[Row]:
    rows = []
    for rep in reps:
        spec, status = rep.get("spec") or {}, rep.get("status") or {}
        port = spec.get("port") or {}
        rows.append(
            {
                "account": account_of(rep["metadata"]["namespace"]),
                "load-balancer": str(spec.get("load-balancer", "")),
                "name": rep["metadata"]["name"],
                "endpoint": f"{spec.get('address', '')}:{port.get('port', '')}/{port.get('protocol', 'TCP')}",
                "port-name": str(port.get("name") or ""),
                "node": str(spec.get("node-address") or "<ad hoc>"),
                "tunnel-id": str(status.get("tunnel-id", "")),
                "ready": condition_status(rep, "Ready"),
                "cluster": str(spec.get("cluster", "")),
                "reason": ready_reason(rep),
                "age": age(rep["metadata"].get("creationTimestamp")),
            }
        )
    return rows


def describe_lb(lb: JSON, events: list[JSON]) -> str:
    meta, spec, status = lb["metadata"], lb.get("spec") or {}, lb.get("status") or {}
    lines = [
        f"Name:            {meta['name']}",
        f"Account:         {account_of(meta['namespace'])}",
        f"Namespace:       {meta['namespace']}",
        f"Service ID:      {spec.get('service-id', '<none>')}",
        f"Public address:  {spec.get('public-address', '<none>')}",
        f"Service group:   {spec.get('service-group', '')}",
        "Public ports:",
    ]
    for port in spec.get("public-ports") or []:
        lines.append(f"  {port['port']}/{port.get('protocol', 'TCP')} -> {port.get('targetPort', port['port'])}")
    lines.append("Conditions:")
    conditions = status.get("conditions") or []
    rows = [{k: str(c.get(k, "")) for k in ("type", "status", "reason", "message")} for c in conditions]
    lines += ["  " + line for line in table(rows, ["type", "status", "reason", "message"]).splitlines()]
    lines.append("Tunnels:")
    tunnels = tunnel_rows([lb])
    lines += ["  " + line for line in table(tunnels, ["node", "tunnel-id", "epic-address", "epic-port"]).splitlines()]
    lines.append("Events:")
    event_rows = [
        {
            "type": str(e.get("type", "")),
            "reason": str(e.get("reason", "")),
            "age": age(e.get("lastTimestamp") or e.get("eventTime")),
            "message": str(e.get("message", "")),
        }
        for e in events
    ]
    lines += ["  " + line for line in table(event_rows, ["type", "reason", "age", "message"]).splitlines()]
    return "\n".join(lines)


def kube_list(items: list[JSON]) -> JSON:
    """A list of objects as `kubectl get -o json|yaml` prints one."""
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def names(items: list[JSON], info: ResourceInfo) -> str:
    """`kubectl get -o name`: one `kind.group/name` a line."""
    return "\n".join(f"{info.singular}.{info.group}/{item['metadata']['name']}" for item in items)


def component_rows(deployments: list[JSON]) -> list[Row]:
    """What `epicctl version` says of each service: its Deployments (label `app.kubernetes.io/name:
    tollgate-<component>`), their `app.kubernetes.io/version` label, the image their container runs and how many
    replicas are ready; a service with no Deployment is `not installed`."""
    rows = []
    for component in COMPONENTS:
        chart = f"tollgate-{component}"
        found = [d for d in deployments if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == chart]
        if not found:
            rows.append({"component": component, "version": NOT_INSTALLED})
        for deployment in sorted(found, key=lambda d: (d["metadata"]["namespace"], d["metadata"]["name"])):
            containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
            own = [c for c in containers if c.get("name") == chart] or containers[:1]
            status = deployment.get("status") or {}
            rows.append(
                {
                    "component": component,
                    "version": str(deployment["metadata"]["labels"].get("app.kubernetes.io/version", "<unlabelled>")),
                    "image": str(own[0].get("image", "")) if own else "",
                    "namespace": deployment["metadata"]["namespace"],
                    "ready": f"{status.get('readyReplicas', 0)}/{(deployment.get('spec') or {}).get('replicas', 1)}",
                }
            )
    return rows


def server_version_text(server: JSON) -> str:
    """The server half of `epicctl version`: the API server's version, then a row per tollgate service."""
    return f"Server Version: {server['kubernetes']}\n" + table(server["components"], VERSION_COLUMNS)
