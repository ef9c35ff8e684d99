"""Arbitration between RoutedIPs asking for one address: the oldest claim holds it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tollgate.routedip.arbitration import conflict_message, holder_instead, letting_go, nodes_to_let_go, rivals
from tollgate.routedip.state import RoutedIPState, routed_ip_state


def rip(namespace: str, name: str, created: str, ip: str = "203.0.113.5", **meta: Any) -> RoutedIPState:
    return routed_ip_state(
        {
            "metadata": {
                "namespace": namespace,
                "name": name,
                "uid": f"uid-{name}",
                "creationTimestamp": created,
                **meta,
            },
            "spec": {"className": "c", "routedIP": ip, "serviceRef": {"serviceName": "web"}},
        }
    )


def test_the_oldest_claim_holds_the_address_and_the_others_give_way() -> None:
    old = rip("a", "old", "2026-01-01T00:00:00Z")
    new = rip("a", "new", "2026-01-01T00:00:05Z")
    newer = rip("b", "newer", "2026-01-01T00:00:09Z")
    everyone = [newer, new, old]
    assert holder_instead(old, everyone) is None
    assert holder_instead(new, everyone) == old
    assert holder_instead(newer, everyone) == old
    assert [r.name for r in rivals(old, everyone)] == ["new", "newer"]


def test_claims_of_the_same_second_are_ordered_by_namespace_then_name() -> None:
    second = "2026-01-01T00:00:00Z"
    b_a, a_z, a_b = rip("b", "a", second), rip("a", "z", second), rip("a", "b", second)
    everyone = [b_a, a_z, a_b]
    assert holder_instead(a_b, everyone) is None
    assert holder_instead(a_z, everyone) == a_b
    assert holder_instead(b_a, everyone) == a_b


def test_other_addresses_and_the_object_itself_are_no_rivals() -> None:
    mine = rip("a", "web", "2026-01-01T00:00:05Z")
    elsewhere = rip("a", "old", "2026-01-01T00:00:00Z", ip="203.0.113.6")
    assert holder_instead(mine, [mine, elsewhere]) is None
    assert rivals(mine, [mine, elsewhere]) == []


def test_a_claim_being_deleted_holds_until_it_is_gone() -> None:
    leaving = rip("a", "old", "2026-01-01T00:00:00Z", deletionTimestamp="2026-01-02T00:00:00Z")
    waiting = rip("a", "new", "2026-01-01T00:00:05Z")
    assert leaving.deleting
    assert holder_instead(waiting, [leaving, waiting]) == leaving
    assert holder_instead(waiting, [waiting]) is None


def test_a_claim_without_a_creation_time_counts_as_the_newest() -> None:
    undated = routed_ip_state({"metadata": {"namespace": "a", "name": "a"}, "spec": {"routedIP": "203.0.113.5"}})
    dated = rip("z", "z", "2026-01-01T00:00:00Z")
    assert undated.created == datetime.max.replace(tzinfo=UTC)
    assert holder_instead(undated, [undated, dated]) == dated


def test_the_message_names_the_winner_only_within_the_namespace() -> None:
    loser = rip("tenant-a", "copy", "2026-01-01T00:00:05Z")
    same = conflict_message(loser, rip("tenant-a", "original", "2026-01-01T00:00:00Z"))
    assert "RoutedIP original" in same and "spec.routedIP: 203.0.113.5" in same
    other = conflict_message(loser, rip("tenant-b", "theirs", "2026-01-01T00:00:00Z"))
    assert "a RoutedIP of another namespace" in other
    assert "tenant-b" not in other and "theirs" not in other


def test_the_holder_waits_for_newer_claims_placed_before_it_to_let_go(routed_ip: Callable[..., RoutedIPState]) -> None:
    holder = routed_ip("old", created="2026-01-01T00:00:00Z")
    placed = routed_ip("new", created="2026-01-01T00:00:05Z", assigned="a", target="b")
    waiting = routed_ip("newer", created="2026-01-01T00:00:09Z")
    assert letting_go(holder, [holder, placed, waiting]) == [placed]
    assert letting_go(holder, [holder, waiting]) == [], "no rival is placed: the holder acts"


def test_a_claim_giving_way_unassigns_only_where_no_rival_records_the_address(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    holder = routed_ip("old", created="2026-01-01T00:00:00Z", assigned="b")
    loser = routed_ip("new", created="2026-01-01T00:00:05Z", assigned="a", target="b")
    assert nodes_to_let_go(loser, [holder, loser]) == ["a"], "b is where the holder has the address"
    assert nodes_to_let_go(loser, [loser]) == ["a", "b"]
