"""The client clusters a load balancer serves (its status `upstream-clusters`): a cluster joins with its first
endpoint, unless the load balancer serves another one and its service group cannot be shared, and leaves with its
last."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client

from tollgate.allocator.k8s import JSON, Kube, is_conflict
from tollgate.allocator.registry.errors import AbortedError, NotFoundError, NotShareableError
from tollgate.allocator.registry.records import CLUSTERS, pointer
from tollgate.allocator.tunnels import ATTEMPTS, Metrics
from tollgate.models.epic import DEFAULT_CLUSTER, LBServiceGroup, LBServiceGroupSpec, LoadBalancer


@dataclass
class ClientClusters:
    kube: Kube
    metrics: Metrics

    async def admit(self, lb: JSON, cluster: str) -> JSON:
        """Record the client cluster among the load balancer's `upstream-clusters`; refused when the load balancer
        serves another cluster already and its service group cannot be shared. The load balancer as it is now."""
        namespace, name = lb["metadata"]["namespace"], lb["metadata"]["name"]
        group_name = lb["spec"].get("service-group", "")
        group = await self.kube.get(LBServiceGroup, namespace, group_name)
        shareable = LBServiceGroupSpec.model_validate((group or {}).get("spec") or {}).can_be_shared
        current: JSON | None = lb
        for _ in range(ATTEMPTS):
            current = current or await self.kube.get(LoadBalancer, namespace, name)
            if current is None:
                raise NotFoundError(f"load balancer {name!r} was deleted")
            clusters = list((current.get("status") or {}).get(CLUSTERS) or [])
            if cluster in clusters:
                return current
            if clusters and not shareable:
                raise NotShareableError(
                    f"cluster: load balancer {name!r} serves cluster {clusters[0]!r}, and its service group "
                    f"{group_name!r} cannot be shared (can-be-shared: false)"
                )
            current.setdefault("status", {})[CLUSTERS] = [*clusters, cluster]
            try:
                return await self.kube.replace_status(LoadBalancer, current)
            except client.ApiException as error:
                if not is_conflict(error):
                    raise
                self.metrics.conflict("LoadBalancer")
                current = None
        raise AbortedError(f"load balancer {namespace}/{name}: still conflicting after {ATTEMPTS} attempts")

    async def release(self, rep: JSON) -> None:
        """A RemoteEndpoint went: its client cluster leaves the load balancer if no other endpoint of it is left."""
        namespace, lb_name = rep["metadata"]["namespace"], rep["spec"]["load-balancer"]
        cluster = rep["spec"].get("cluster", DEFAULT_CLUSTER)
        others = await self.kube.remote_endpoints_of(namespace, lb_name)
        if any(r["spec"].get("cluster", DEFAULT_CLUSTER) == cluster for r in others):
            return
        lb = await self.kube.get(LoadBalancer, namespace, lb_name)
        clusters = list(((lb or {}).get("status") or {}).get(CLUSTERS) or [])
        if cluster in clusters:
            index = clusters.index(cluster)
            path = pointer("status", CLUSTERS, str(index))
            await self.kube.json_patch_status(
                LoadBalancer,
                namespace,
                lb_name,
                [{"op": "test", "path": path, "value": cluster}, {"op": "remove", "path": path}],
            )
