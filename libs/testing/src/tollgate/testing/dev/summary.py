"""The summary `make dev` prints once the system is up (and keeps current in .dev/summary.txt): each service and
its restarts, the TLS endpoints and where their CA and root's token are, Jaeger, the control plane, the custom
resources, tunnel IDs, the Envoy proxies and the data path's proof."""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING, Any

from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.testing.agents import CA_FILE
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.dev.certificates import ROOT_TOKEN
from tollgate.testing.services import ServiceProcess

if TYPE_CHECKING:
    from tollgate.testing.dev.system import DevSystem


def summarize(system: DevSystem) -> str:
    lines = ["", "tollgate dev system", "", "services:"]
    for resource in system.resources:
        if resource.module is None:
            continue
        process = system.processes.get(resource.name)
        state = "ready" if process is not None and _ready(process) else "DOWN"
        endpoints = "  ".join(f"{k} {v}" for k, v in resource.endpoints.items())
        health = process.health_url if process else "-"
        restarts = system.restarter.restarts(resource.name)
        lines.append(f"  {resource.name:<10} {state:<6} restarts {restarts:<3} health {health}  {endpoints}")
    allocator = system.resource("allocator")
    lines += ["", "registration API (TLS; per-account tokens: epicctl credentials create|rotate ACCOUNT):",
              f"  {allocator.endpoints['grpc']}  CA {system.allocator_dir / CA_FILE}  "
              f"root's token {system.allocator_dir / ROOT_TOKEN}"]  # fmt: skip
    lines += ["", "EPIC's REST API (TLS, same CA; HTTP Basic: epicctl create user, or the same bearer token):",
              f"  https://{allocator.endpoints['rest']}/api/epic"]  # fmt: skip
    lines += ["", "traces (Jaeger, in memory; a change is one trace: admission, reconcile, xds push, Envoy ACK):",
              f"  {system.jaeger.ui_url}/search?service=tollgate-allocator"]  # fmt: skip
    lines += ["", "control plane (restarted by the cluster's watchdog when a process exits):"]
    running = system.cluster.pids()
    for component, restarts in system.cluster.restarts().items():
        pid = f"pid {running[component]}" if component in running else "DOWN"
        lines.append(f"  {component:<24} {pid:<10} restarts {restarts}")
    lines += ["", "custom resources (Ready):"]
    for kind, name, ready in _resources(system.cluster):
        lines.append(f"  {kind:<22} {name:<40} {ready}")
    lines += ["", "tunnel IDs:"]
    tunnels = _tunnels(system.cluster)
    lines += [f"  {lb:<40} {address:<16} tunnel {tunnel}" for lb, address, tunnel in tunnels] or ["  none"]
    lines += ["", f"Envoy proxies (sync per type: epicctl proxy-status --xds-url {system.xds_debug_url}):"]
    lines += _proxies(system) or ["  none"]
    lines += ["", "data path (echo servers answer with their name):", *system.proof]
    return "\n".join(lines) + "\n"


def _ready(process: ServiceProcess) -> bool:
    try:
        process.wait_ready(timeout=2)
    except Exception:
        return False
    return True


def _get(cluster: EmbeddedCluster, resource: str) -> list[dict[str, Any]]:
    result = cluster.kubectl("get", resource, "-A", "-o", "json", check=False)
    return list(json.loads(result.stdout).get("items", [])) if result.returncode == 0 else []


def _resources(cluster: EmbeddedCluster) -> list[tuple[str, str, str]]:
    rows = []
    for item in _get(cluster, "tollgate"):
        meta = item["metadata"]
        conditions = {c["type"]: c for c in item.get("status", {}).get("conditions", [])}
        ready = conditions.get("Ready") or conditions.get("Programmed") or conditions.get("Complete")
        state = f"{ready['type']}={ready['status']} ({ready.get('reason', '')})" if ready else "no condition yet"
        where = f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/")
        rows.append((item["kind"], where, state))
    return rows


def _tunnels(cluster: EmbeddedCluster) -> list[tuple[str, str, int]]:
    rows = []
    for lb in _get(cluster, "loadbalancers.epic.acnodal.io"):
        for address, tunnel in lb.get("status", {}).get("gue-tunnel-endpoints", {}).items():
            rows.append((f"{lb['metadata']['namespace']}/{lb['metadata']['name']}", address, tunnel["tunnel-id"]))
    return rows


def _http_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.load(response)
    except Exception:
        return None


def _proxies(system: DevSystem) -> list[str]:
    envoys = _http_json(system.resource("xds").endpoints["debug"]) or []
    sync = {e["node"]: "in sync" if e.get("in_sync") else "syncing" for e in envoys if isinstance(e, dict)}
    rows = []
    for pod in _get(system.cluster, "pods"):
        labels = pod["metadata"].get("labels", {})
        if ENVOY_PROXY_LABEL not in labels:
            continue
        node = f"{pod['metadata']['name']}.{pod['metadata']['namespace']}"
        ready: dict[str, str] = next((c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"), {})
        state = sync.get(node, "not connected")
        readiness = "Ready" if ready.get("status") == "True" else "NotReady"
        rows.append(f"  {node:<50} {pod['status'].get('podIP', '-'):<12} {readiness:<12} xds {state}")
    return rows
