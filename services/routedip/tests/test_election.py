"""Election as pure logic: eligibility, youngest/oldest, no flapping, cool-down, limits, resumed moves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from tollgate.models.nodes import Taint
from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.election import (
    Decision,
    ElectionInput,
    Policy,
    backing_nodes,
    class_usage,
    decide,
    ineligibility,
    usage_by_node,
)
from tollgate.routedip.state import Endpoint, NodeState, PodState, RoutedIPState, ServiceState, SliceState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def node(
    name: str,
    age: int,
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: tuple[Taint, ...] = (),
    deleting: bool = False,
) -> NodeState:
    """A node created `age` minutes before T0 + 1 h (a bigger age is an older node)."""
    return NodeState(
        name=name,
        created=T0 + timedelta(hours=1) - timedelta(minutes=age),
        ready=ready,
        ready_detail="Ready" if ready else "NotReady (Ready=Unknown, NodeStatusUnknown)",
        unschedulable=unschedulable,
        taints=taints,
        deleting=deleting,
        provider_id=f"digitalocean://{sum(map(ord, name))}",
    )


def election(
    nodes: list[NodeState],
    *,
    backing: set[str] | None = None,
    usage: dict[str, int] | None = None,
    limit: int = 1,
    policy: Policy = "Youngest",
    holder: str | None = None,
    target: str | None = None,
    last_move: datetime | None = None,
    cooldown: int = 0,
    now: datetime = T0 + timedelta(hours=2),
) -> Decision:
    by_name = {n.name: n for n in nodes}
    return decide(
        ElectionInput(
            nodes=by_name,
            backing=frozenset(by_name if backing is None else backing),
            usage=usage or {},
            limit=limit,
            policy=policy,
            holder=holder,
            target=target,
            last_move=last_move,
            cooldown=timedelta(seconds=cooldown),
            now=now,
        )
    )


THREE = [node("old", 30), node("mid", 20), node("young", 10)]


def test_the_youngest_eligible_node_wins() -> None:
    decision = election(THREE)
    assert (decision.action, decision.node) == ("move", "young")
    assert decision.eligible == ("young", "mid", "old")
    assert "youngest of 3 eligible" in decision.reason


def test_the_oldest_wins_with_the_oldest_policy() -> None:
    assert election(THREE, policy="Oldest").node == "old"


def test_ties_in_age_go_to_the_name_that_sorts_last_or_first() -> None:
    twins = [node("worker-1", 10), node("worker-2", 10), node("worker-0", 10)]
    assert election(twins).node == "worker-2"
    assert election(twins, policy="Oldest").node == "worker-0"


def test_a_holder_that_stays_eligible_keeps_the_ip_when_a_younger_node_appears() -> None:
    decision = election([*THREE, node("newest", 1)], holder="mid")
    assert (decision.action, decision.node) == ("keep", "mid")


def test_a_not_ready_holder_loses_the_ip_at_once_whatever_the_cooldown() -> None:
    nodes = [node("old", 30), node("mid", 20), node("young", 10, ready=False)]
    decision = election(nodes, holder="young", last_move=T0 + timedelta(hours=2), cooldown=600)
    assert (decision.action, decision.node, decision.urgent) == ("move", "mid", True)
    assert decision.ineligible["young"].startswith("NotReady")


def test_a_deleted_holder_loses_the_ip() -> None:
    decision = election(THREE, holder="gone-node")
    assert (decision.action, decision.node, decision.urgent) == ("move", "young", True)
    assert "gone-node is gone" in decision.reason


def test_a_cordoned_holder_waits_for_the_cooldown_then_moves() -> None:
    nodes = [node("old", 30), node("young", 10, unschedulable=True)]
    moved_at = T0 + timedelta(hours=2)
    waiting = election(nodes, holder="young", last_move=moved_at, cooldown=30, now=moved_at + timedelta(seconds=10))
    assert (waiting.action, waiting.node) == ("wait", "young")
    assert waiting.retry_after == 20
    assert "cordoned" in waiting.reason
    moving = election(nodes, holder="young", last_move=moved_at, cooldown=30, now=moved_at + timedelta(seconds=31))
    assert (moving.action, moving.node, moving.urgent) == ("move", "old", False)


def test_a_holder_whose_endpoint_went_away_moves_at_once_under_local_traffic() -> None:
    moved_at = T0 + timedelta(hours=2)
    decision = election(THREE, backing={"old"}, holder="young", last_move=moved_at, cooldown=600, now=moved_at)
    assert (decision.action, decision.node, decision.urgent) == ("move", "old", True)
    assert "not backing the Service" in decision.ineligible["young"]


def test_the_per_node_limit_passes_over_full_nodes() -> None:
    decision = election(THREE, usage={"young": 1}, limit=1)
    assert decision.node == "mid"
    assert decision.ineligible["young"] == "at the per-node limit (1/1 routed IPs)"
    assert election(THREE, usage={"young": 1}, limit=2).node == "young"


def test_a_holder_over_a_lowered_limit_moves_after_the_cooldown() -> None:
    decision = election(THREE, usage={"young": 2}, limit=2, holder="young")
    assert (decision.action, decision.node, decision.urgent) == ("move", "mid", False)


def test_nothing_eligible_is_reported_with_every_reason() -> None:
    nodes = [node("a", 30, ready=False), node("b", 20, unschedulable=True), node("c", 10, deleting=True)]
    decision = election(nodes)
    assert (decision.action, decision.node) == ("none", None)
    assert "a: NotReady" in decision.reason
    assert "b: cordoned" in decision.reason
    assert "c: being deleted" in decision.reason


def test_a_failed_holder_with_no_alternative_keeps_nothing_new() -> None:
    nodes = [node("a", 30, ready=False), node("b", 20, ready=False)]
    decision = election(nodes, holder="a")
    assert (decision.action, decision.urgent) == ("none", True)


def test_a_move_in_progress_is_resumed_while_its_target_stays_eligible() -> None:
    decision = election([*THREE, node("newest", 1)], holder="old", target="mid")
    assert (decision.action, decision.node) == ("move", "mid")


def test_a_move_whose_target_failed_is_decided_again() -> None:
    nodes = [node("old", 30), node("mid", 20, ready=False), node("young", 10)]
    assert election(nodes, holder="old", target="mid").node == "old"
    assert election(nodes, holder=None, target="mid").node == "young"


def test_taints() -> None:
    def why(*taints: Taint) -> str | None:
        return ineligibility(node("n", 1, taints=taints), backing=True, usage=0, limit=1)

    assert why(Taint(MOVE_TAINT_KEY, "PreferNoSchedule")) is None
    assert why(Taint("example.com/soft", "PreferNoSchedule")) is None
    assert why(Taint("example.com/gpu", "NoSchedule")) == "tainted example.com/gpu:NoSchedule"
    assert why(Taint("example.com/evict", "NoExecute")) == "draining (taint example.com/evict:NoExecute)"
    assert why(Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule")) == (
        "draining (taint ToBeDeletedByClusterAutoscaler:NoSchedule)"
    )
    assert ineligibility(None, backing=True, usage=0, limit=1) == "gone"


def test_no_flapping_when_a_node_fails_and_recovers_repeatedly() -> None:
    """The IP moves once when its node fails, and stays where it went when the node comes back."""
    holder, moves = "young", 0
    for round_ in range(6):
        failing = round_ % 2 == 0
        nodes = [node("old", 30), node("mid", 20), node("young", 10, ready=not failing)]
        decision = election(nodes, holder=holder, cooldown=60, last_move=T0)
        if decision.action == "move":
            holder, moves = decision.node, moves + 1  # type: ignore[assignment]
    assert (holder, moves) == ("mid", 1)


def test_backing_nodes_are_those_of_ready_selected_pods_under_local_traffic() -> None:
    service = ServiceState("ns", "svc", {"app": "x"}, local_traffic=True)
    pods = [
        PodState("ns", "ready", {"app": "x"}, "n1", active=True, ready=True),
        PodState("ns", "starting", {"app": "x"}, "n2", active=True, ready=False),
        PodState("ns", "terminating", {"app": "x"}, "n3", active=False, ready=True),
        PodState("ns", "unselected", {"app": "y"}, "n4", active=True, ready=True),
        PodState("other", "elsewhere", {"app": "x"}, "n5", active=True, ready=True),
    ]
    assert backing_nodes(service, [], pods, ["n1", "n2", "n3", "n4", "n5", "n6"]) == {"n1"}
    cluster = ServiceState("ns", "svc", {"app": "x"}, local_traffic=False)
    assert backing_nodes(cluster, [], [], ["n1", "n6"]) == {"n1", "n6"}
    assert backing_nodes(None, [], pods, ["n1"]) == frozenset()


def test_a_service_without_selector_is_backed_by_its_endpoint_slices() -> None:
    service = ServiceState("ns", "svc", None, local_traffic=True)
    slices = [
        SliceState(
            "ns", "svc", "svc-abc", (Endpoint("n1", True, "p1"), Endpoint("n2", False, "p2"), Endpoint(None, True))
        )
    ]
    assert backing_nodes(service, slices, [], ["n1", "n2", "n3"]) == {"n1"}


def test_usage_counts_holders_and_targets() -> None:
    assert usage_by_node([{"a"}, {"a", "b"}, set()]) == {"a": 2, "b": 1}


def test_the_per_node_limit_counts_the_other_ips_of_the_class_and_reservations_being_written(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    electing = routed_ip("electing", ip="203.0.113.1", assigned="a")
    moving = routed_ip("moving", ip="203.0.113.2", assigned="a", target="b")
    reserving = routed_ip("reserving", ip="203.0.113.3")
    other_class = routed_ip("other", ip="203.0.113.4", class_name="other", assigned="c")
    everyone = [electing, moving, reserving, other_class]
    assert class_usage(electing, everyone, {}) == {"a": 1, "b": 1}, "not its own place, not another class's"
    being_written = {reserving.key: ("c", "c"), other_class.key: ("other", "a")}
    assert class_usage(electing, everyone, being_written) == {"a": 1, "b": 1, "c": 1}


names = st.sampled_from(["n0", "n1", "n2", "n3", "n4"])


@given(
    ready=st.dictionaries(names, st.booleans(), min_size=1),
    backing=st.sets(names),
    usage=st.dictionaries(names, st.integers(0, 3)),
    limit=st.integers(1, 3),
    holder=st.none() | names,
    policy=st.sampled_from(["Youngest", "Oldest"]),
)
def test_an_elected_node_is_always_eligible(
    ready: dict[str, bool], backing: set[str], usage: dict[str, int], limit: int, holder: str | None, policy: Policy
) -> None:
    nodes = [node(name, int(name[1:]) * 5 + 1, ready=is_ready) for name, is_ready in ready.items()]
    decision = election(nodes, backing=backing, usage=usage, limit=limit, holder=holder, policy=policy)
    if decision.action in ("move", "keep"):
        assert decision.node in decision.eligible
        assert decision.node in backing and ready[decision.node] and usage.get(decision.node, 0) < limit
    if decision.action == "move" and holder is not None:
        assert holder not in decision.eligible
    if decision.action == "move" and decision.eligible:
        assert decision.node == decision.eligible[0]
