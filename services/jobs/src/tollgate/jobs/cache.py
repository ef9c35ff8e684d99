"""What the controller knows of the cluster besides the Goops: each Goop's worker Jobs and the nodes, as the watches
told them and the resync corrected them. Pure, no I/O.

kopf's indexes held this before, but only a watch event changes an index: an object deleted while its watch was
down (kopf lists again after 410 Gone and never reports what the listing lacks) stayed in it for good.
"""

from __future__ import annotations

from dataclasses import dataclass

from tollgate.jobs.nodes import NodeInfo
from tollgate.jobs.workers import ObservedJob
from tollgate.runtime.resync import Key


@dataclass(frozen=True)
class OwnedJob:
    """A worker Job and the Goop that controls it."""

    goop: Key
    goop_uid: str
    job: ObservedJob


class ClusterCache:
    """The worker Jobs by Goop and the nodes by name; the controller's ClusterView."""

    def __init__(self) -> None:
        self._jobs: dict[Key, OwnedJob] = {}
        self._by_goop: dict[str, dict[str, ObservedJob]] = {}
        self._nodes: dict[str, NodeInfo] = {}

    def jobs(self, goop_uid: str) -> list[ObservedJob]:
        return list(self._by_goop.get(goop_uid, {}).values())

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes.values())

    def set_job(self, owned: OwnedJob) -> None:
        # A Job of that name may be another Goop's whose deletion was missed (a Goop deleted and created again).
        self.remove_job((owned.goop[0], owned.job.name))
        self._jobs[(owned.goop[0], owned.job.name)] = owned
        self._by_goop.setdefault(owned.goop_uid, {})[owned.job.name] = owned.job

    def remove_job(self, key: Key) -> OwnedJob | None:
        """Forget the Job (namespace, name); what was known of it, if anything."""
        owned = self._jobs.pop(key, None)
        if owned is not None:
            siblings = self._by_goop[owned.goop_uid]
            del siblings[owned.job.name]
            if not siblings:
                del self._by_goop[owned.goop_uid]
        return owned

    def set_node(self, node: NodeInfo) -> None:
        self._nodes[node.name] = node

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)
