"""The `local` provider, for development: it records what a cloud would do in ConfigMaps.

In the namespace tollgate-routedip runs in, labelled `routedip.tollgate.io/local`:

- `routedip-local-ip-<ip with dashes>` (label value `ip`), one per IP: a key per node holding the IP,
  valued `<namespace>/<name>` of the RoutedIP (two keys mid-move);
- `routedip-local-firewall-<class>` (label value `firewall`), one per class: a key per node with open
  ports, valued `tcp/30080,udp/30053`.

One object per IP keeps concurrent moves from contending for one object; keys are written with merge
patches. `kubectl get configmap -l routedip.tollgate.io/local -o yaml` (or a test) reads them.
"""

from __future__ import annotations

from collections.abc import Mapping

from tollgate.routedip.firewall import FirewallPlan
from tollgate.routedip.k8s import Kube
from tollgate.routedip.providers import FirewallContext, NodeTarget, RoutedIPRef
from tollgate.runtime.kube import is_conflict, is_not_found

LABEL = "routedip.tollgate.io/local"


def ip_config_map(ip: str) -> str:
    return f"routedip-local-ip-{ip.replace('.', '-')}"


def firewall_config_map(class_name: str) -> str:
    return f"routedip-local-firewall-{class_name}"


class LocalProvider:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    async def _write(self, name: str, kind: str, data: Mapping[str, str | None]) -> None:
        for _ in range(3):
            try:
                await self.kube.patch_config_map(self.namespace, name, {"data": dict(data)})
                return
            except Exception as error:
                if not is_not_found(error):
                    raise
            if all(value is None for value in data.values()):
                return
            body = {
                "metadata": {
                    "name": name,
                    "labels": {"app.kubernetes.io/managed-by": "tollgate-routedip", LABEL: kind},
                },
                "data": {key: value for key, value in data.items() if value is not None},
            }
            try:
                await self.kube.create_config_map(self.namespace, body)
                return
            except Exception as error:
                if not is_conflict(error):
                    raise

    async def _read(self, name: str) -> dict[str, str]:
        try:
            return dict((await self.kube.read_config_map(self.namespace, name)).get("data") or {})
        except Exception as error:
            if is_not_found(error):
                return {}
            raise

    async def assign(self, routed_ip: RoutedIPRef, node: NodeTarget, previous: NodeTarget | None) -> None:
        await self._write(ip_config_map(routed_ip.ip), "ip", {node.name: f"{routed_ip.namespace}/{routed_ip.name}"})

    async def unassign(self, routed_ip: RoutedIPRef, node: NodeTarget) -> None:
        await self._write(ip_config_map(routed_ip.ip), "ip", {node.name: None})

    async def apply_firewall(self, plan: FirewallPlan, context: FirewallContext) -> None:
        name = firewall_config_map(context.routed_ip_class.name)
        wanted = {node: ",".join(str(p) for p in sorted(n.ports)) for node, n in plan.nodes.items() if n.ports}
        current = await self._read(name)
        changes: dict[str, str | None] = {node: None for node in current if node not in wanted}
        changes.update({node: ports for node, ports in wanted.items() if current.get(node) != ports})
        if changes:
            await self._write(name, "firewall", changes)
