"""Simulated nodes made NotReady or cordoned by a test, and put back afterwards.

KWOK keeps every node Ready: it rewrites a node's Ready condition as soon as anything else changes it. A
ValidatingAdmissionPolicy holds a labelled node NotReady by refusing any status write that would make it
Ready again; removing the label lets KWOK restore it.
"""

from __future__ import annotations

from functools import partial

from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.wait import wait_for

HOLD_LABEL = "testing.tollgate.io/hold-not-ready"
HOLD_POLICY = "tollgate-testing-hold-not-ready"
HOLD_POLICY_OBJECTS = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": HOLD_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes/status"]}
                ]
            },
            "matchConditions": [
                {
                    "name": "held",
                    "expression": f"has(object.metadata.labels) && '{HOLD_LABEL}' in object.metadata.labels",
                }
            ],
            "validations": [
                {
                    "expression": "!has(object.status.conditions) || "
                    "object.status.conditions.all(c, c.type != 'Ready' || c.status != 'True')",
                    "message": "the node is held NotReady by a test",
                }
            ],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": HOLD_POLICY},
        "spec": {"policyName": HOLD_POLICY, "validationActions": ["Deny"]},
    },
]


def is_ready(obj: client.V1Node | client.V1Pod) -> bool:
    """Whether the node's (or pod's) Ready condition is True."""
    status = obj.status
    return status is not None and any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


def node_ready(core: client.CoreV1Api, name: str) -> bool:
    return is_ready(core.read_node(name))


def node_recovered(core: client.CoreV1Api, name: str) -> bool:
    """Ready, and without the taints the node lifecycle controller put on it while it was not."""
    node = core.read_node(name)
    taints = (node.spec.taints if node.spec is not None else None) or []
    return is_ready(node) and not any(t.key.startswith("node.kubernetes.io/") for t in taints)


class Nodes:
    """Makes nodes NotReady or cordoned, and puts every node it touched back as it was."""

    def __init__(self, cluster: EmbeddedCluster, core: client.CoreV1Api) -> None:
        self.cluster = cluster
        self.core = core
        self.held: set[str] = set()
        self.cordoned: set[str] = set()

    def hold_not_ready(self, name: str) -> None:
        """Ready=False, kept so: the policy refuses KWOK's status writes while the node carries the label."""
        self.held.add(name)
        self.core.patch_node(name, {"metadata": {"labels": {HOLD_LABEL: "true"}}})
        condition = {"type": "Ready", "status": "False", "reason": "KubeletDown", "message": "held by a test"}

        def not_ready() -> bool:
            # The policy starts enforcing a moment after it is created: write until the write sticks.
            self.core.patch_node_status(name, {"status": {"conditions": [condition]}})
            return not node_ready(self.core, name)

        wait_for(not_ready, f"node {name} NotReady", timeout=20, interval=0.2)

    def cordon(self, name: str) -> None:
        self.cordoned.add(name)
        self.core.patch_node(name, {"spec": {"unschedulable": True}})

    def restore(self) -> None:
        existing = {n.metadata.name for n in self.core.list_node().items if n.metadata is not None}
        for name in self.cordoned & existing:
            self.core.patch_node(name, {"spec": {"unschedulable": None}})
        for name in self.held & existing:
            self.core.patch_node(name, {"metadata": {"labels": {HOLD_LABEL: None}}})
        for name in (self.held | self.cordoned) & existing:
            wait_for(partial(node_recovered, self.core, name), f"{name} to recover", timeout=60)
