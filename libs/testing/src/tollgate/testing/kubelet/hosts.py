"""Cluster DNS without a DNS server: one hosts file, which the kubelet keeps and every container (and, through
the supervisor, every Envoy) sees as /etc/hosts. Pure, apart from rewrite()."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

from tollgate.testing.kubelet.proxy import API_SERVICE, cluster_ip, is_ready, selects
from tollgate.testing.pods import JSON

HEADER = "# Kept by the embedded kubelet (tollgate.testing.kubelet): cluster names -> addresses, rewritten in place.\n"


def service_names(name: str, namespace: str) -> list[str]:
    names = [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]
    return [f"{name}.{namespace}", *names] if (namespace, name) == API_SERVICE else names


def service_address(service: JSON, pods: Iterable[JSON], api_address: str) -> str | None:
    """Where a Service's name points: its ClusterIP when the kubelet serves it (see proxy.py); otherwise (a
    headless Service, or a cluster whose ClusterIPs are not local) one ready endpoint, the lowest so that the
    file is stable, and for the `kubernetes` Service the API server itself."""
    if (address := cluster_ip(service)) is not None:
        return address
    if (service["metadata"]["namespace"], service["metadata"]["name"]) == API_SERVICE:
        return api_address
    ready = [ipaddress.IPv4Address(p["status"]["podIP"]) for p in pods if selects(service, p) and is_ready(p)]
    return str(min(ready)) if ready else None


def hosts_text(services: Iterable[JSON], pods: Iterable[JSON], api_address: str, hostnames: Mapping[str, str]) -> str:
    """localhost; `<svc>.<ns>.svc[.cluster.local]` of every Service that has an address (service_address);
    and `hostnames` (hostname -> pod IP of each pod the kubelet runs), which a process may look up."""
    pods = list(pods)
    lines = [HEADER, "127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n"]
    for service in sorted(services, key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
        address = service_address(service, pods, api_address)
        if address is not None:
            names = service_names(service["metadata"]["name"], service["metadata"]["namespace"])
            lines.append(f"{address}\t{' '.join(names)}\n")
    lines += [f"{address}\t{hostname}\n" for hostname, address in sorted(hostnames.items())]
    return "".join(lines)


def rewrite(path: Path, text: str) -> bool:
    """Write `text` into `path` in place (the same inode: containers see it through a bind mount, which a
    rename would not reach); False when it already holds `text`."""
    if path.exists() and path.read_text() == text:
        return False
    with path.open("r+" if path.exists() else "w") as file:
        file.write(text)
        file.truncate()
    return True
