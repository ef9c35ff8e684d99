"""Node taints as the jobs and routedip services read them."""

from __future__ import annotations

from tollgate.models.nodes import Taint, node_taints


def test_taints_are_read_from_the_node_spec_with_empty_values_for_what_is_absent() -> None:
    node = {
        "metadata": {"name": "n"},
        "spec": {
            "taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-21T00:00:00Z"},
                {"effect": "NoSchedule"},
            ]
        },
    }
    assert node_taints(node) == (
        Taint("dedicated", "NoSchedule", "gpu"),
        Taint("node.kubernetes.io/unreachable", "NoExecute"),
    )


def test_a_node_without_taints_or_spec_has_none() -> None:
    assert node_taints({"metadata": {"name": "n"}}) == ()
    assert node_taints({"spec": {"taints": None}}) == ()
