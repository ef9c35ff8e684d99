"""The per-node tunnel entries that LoadBalancers and GWProxies share: one tunnel ID per client node in the status
`gue-tunnel-endpoints`, with where the node's tunnel terminates. Which nodes want one is each kind's own
(tollgate.allocator.registry.registrations for load balancers, tollgate.allocator.registry.gateways for
GWProxies)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tollgate.allocator.k8s import JSON, Kind, Kube, is_conflict, is_not_found
from tollgate.allocator.proxy import OWNER_LABELS, name_not_a_label
from tollgate.allocator.registry.errors import AbortedError, FailedPreconditionError, NotFoundError
from tollgate.allocator.registry.records import PROXY_KINDS, TUNNELS, described, entries, log_fields, pointer
from tollgate.allocator.tunnels import ATTEMPTS, EpicSingleton, TunnelIDs
from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.models.epic import GUEEndpoint, GUETunnelEndpoint

log = logging.getLogger("tollgate.allocator.registry.node_tunnels")
GUE_CACHE_SECONDS = 5.0


def is_refusal(error: client.ApiException) -> bool:
    """The API server answered and did not apply the request: a 4xx. A 5xx may come after the write landed."""
    return 400 <= int(error.status or 0) < 500


@dataclass
class NodeTunnels:
    kube: Kube
    ids: TunnelIDs
    epic: EpicSingleton
    default_gue: GUEEndpoint
    _gue: tuple[float, GUEEndpoint] | None = field(default=None, init=False)

    async def gue_endpoint(self) -> GUEEndpoint:
        """Where tunnels terminate when no Envoy pod is scheduled: the EPIC spec's `gue-endpoint`, else the
        allocator's default."""
        if self._gue is not None and time.monotonic() - self._gue[0] < GUE_CACHE_SECONDS:
            return self._gue[1]
        obj = await self.epic.read()
        configured = (obj.get("spec") or {}).get("gue-endpoint")
        endpoint = GUEEndpoint.model_validate(configured) if configured else self.default_gue
        self._gue = (time.monotonic(), endpoint)
        return endpoint

    async def epic_endpoint(self, obj: JSON) -> GUEEndpoint:
        """Where the tunnels of a LoadBalancer or GWProxy terminate: the node running its (first scheduled) Envoy
        pod; while none runs (or none can: its name is too long a label), the EPIC-wide endpoint."""
        gue = await self.gue_endpoint()
        if name_not_a_label(obj) is not None:
            return gue
        selector = f"{OWNER_LABELS[obj['kind']]}={obj['metadata']['name']},{ENVOY_PROXY_LABEL}=true"
        node = await self.kube.pod_node_address(obj["metadata"]["namespace"], selector)
        return gue if node is None else GUEEndpoint(epic_address=node, epic_port=gue.epic_port)

    async def ensure(self, kind: Kind, namespace: str, name: str, node: str, held: int | None, obj: JSON | None) -> int:
        """The tunnel ID of (LoadBalancer or GWProxy, client node): the one its status records, else a new one
        recorded there. `obj` is the object as just read, if the caller has it. `held` is an ID this node had before
        (IDs are never handed to anyone else, so it may return).

        A new ID goes back to the pool only when its write was definitely refused. After an uncertain outcome
        (a timeout, a cut connection, a 5xx, a cancelled call: the write may have landed) the status is read
        again: the ID is kept if the write landed, and never handed out again otherwise."""
        taken: int | None = None
        uncertain = False
        try:
            for _ in range(ATTEMPTS):
                obj = obj or await self.kube.get(kind, namespace, name)
                if obj is None:
                    raise NotFoundError(f"{described(kind, name)} was deleted")
                if obj["metadata"].get("deletionTimestamp"):
                    raise FailedPreconditionError(f"{described(kind, name)} is being deleted")
                existing = (entries(obj).get(node) or {}).get("tunnel-id")
                if existing is not None:
                    if existing == taken:
                        taken = None
                        log.info("tunnel ID %s for node %s: a write whose answer was lost landed", existing, node)
                    return int(existing)
                if held is None and taken is None:
                    taken = await self.ids.allocate()
                tunnel_id = held if held is not None else taken
                assert tunnel_id is not None
                gue = await self.epic_endpoint(obj)
                entry = GUETunnelEndpoint(epic_address=gue.epic_address, epic_port=gue.epic_port, tunnel_id=tunnel_id)
                obj.setdefault("status", {})[TUNNELS] = entries(obj) | {node: entry.to_wire()}
                try:
                    await self.kube.replace_status(kind, obj)
                except client.ApiException as error:
                    if is_not_found(error):
                        raise NotFoundError(f"{described(kind, name)} was deleted") from None
                    if is_conflict(error):
                        self.ids.metrics.conflict(kind.resource.kind)
                        self.ids.metrics.retried(kind.resource.kind, 1)
                        obj = None
                        continue
                    uncertain = uncertain or not is_refusal(error)
                    raise
                except BaseException:
                    uncertain = True
                    raise
                if tunnel_id == taken:
                    taken = None
                log.info("tunnel ID %s for node %s", tunnel_id, node, extra=log_fields(kind, namespace, name))
                return tunnel_id
        except Exception:
            if taken is not None and uncertain and await self._recorded(kind, namespace, name, node) == taken:
                landed, taken = taken, None
                log.info("tunnel ID %s for node %s: the uncertain write landed", landed, node)
                return landed
            raise
        finally:
            if taken is not None and not uncertain:
                self.ids.give_back(taken)
            elif taken is not None:
                log.warning(
                    "tunnel ID %s is not handed out again: its write for node %s may have landed",
                    taken,
                    node,
                    extra=log_fields(kind, namespace, name),
                )
        raise AbortedError(f"{described(kind, name)} in {namespace}: still conflicting after {ATTEMPTS} attempts")

    async def _recorded(self, kind: Kind, namespace: str, name: str, node: str) -> int | None:
        """The tunnel ID the object's status records for `node`, None when it cannot be read now."""
        try:
            obj = await self.kube.get(kind, namespace, name)
        except Exception:  # the API server is what just failed: the caller raises its own error
            return None
        recorded = (entries(obj or {}).get(node) or {}).get("tunnel-id")
        return None if recorded is None else int(recorded)

    async def remove(self, kind: Kind, namespace: str, name: str, node: str, tunnel_id: Any) -> bool:
        """Remove a node's tunnel entry if it still holds `tunnel_id` (the ID is never handed out again); whether it
        did. The caller gives the node a tunnel again if something came to want one since it looked."""
        path = pointer("status", TUNNELS, node)
        operations = [{"op": "test", "path": f"{path}/tunnel-id", "value": tunnel_id}, {"op": "remove", "path": path}]
        if not await self.kube.json_patch_status(kind, namespace, name, operations):
            return False
        log.info("released tunnel ID %s of node %s", tunnel_id, node, extra=log_fields(kind, namespace, name))
        return True

    async def refresh_epic_address(self, obj: JSON) -> None:
        """Move the tunnel entries of the LoadBalancer or GWProxy to the node that runs its Envoy pod now."""
        gue = await self.epic_endpoint(obj)
        wanted = {"epic-address": str(gue.epic_address), "epic-port": gue.epic_port.to_wire()}
        operations = [
            {"op": "replace", "path": pointer("status", TUNNELS, node, key), "value": value}
            for node, entry in entries(obj).items()
            for key, value in wanted.items()
            if entry.get(key) != value
        ]
        if operations:
            await self.kube.json_patch_status(
                PROXY_KINDS[obj["kind"]], obj["metadata"]["namespace"], obj["metadata"]["name"], operations
            )
