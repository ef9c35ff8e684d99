"""What a reconcile does next, as pure logic: the move's next step, when to give up or retry, the move taint,
what conditions and Events say."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.election import Action, Decision
from tollgate.routedip.providers import ProviderError
from tollgate.routedip.state import Placement, RoutedIPState, class_state
from tollgate.routedip.steps import (
    MoveStep,
    acceptance,
    assigned_message,
    failure_reason,
    heading_to,
    is_news,
    move_step,
    moving_message,
    needs_release,
    provider_retry_after,
    with_move_taint,
    without_move_taint,
)

FINALIZER = "routedip.tollgate.io/release"
MOVE_TAINT = {"key": MOVE_TAINT_KEY, "effect": "PreferNoSchedule", "value": "true"}
FOREIGN_TAINT = {"key": "dedicated", "effect": "NoSchedule", "value": "edge"}
LOCAL_CLASS = class_state({"metadata": {"name": "local"}, "spec": {"className": "local", "provider": "local"}})


@pytest.mark.parametrize(
    ("assigned", "target", "action", "node", "step"),
    [
        (None, None, "move", "b", "reserve"),  # a new RoutedIP: the elected node is reserved, then moved to
        ("a", None, "move", "b", "reserve"),  # a failover: the same
        ("a", "b", "move", "b", "complete"),  # a restarted controller resumes the move it had reserved
        ("a", "b", "move", "c", "abandon"),  # the target failed mid-move: another node was elected
        ("a", "b", "keep", "a", "abandon"),  # the target failed mid-move, the holder is eligible again
        ("a", "b", "none", None, "stall"),  # nothing eligible mid-move: the move is neither done nor given up
        ("a", None, "keep", "a", "settle"),  # the holder stays eligible: no move
        ("a", None, "wait", "a", "settle"),  # the holder cools down
        ("a", None, "none", None, "settle"),  # nothing eligible and no move in progress
    ],
)
def test_the_step_the_election_calls_for_given_where_the_ip_is(
    assigned: str | None, target: str | None, action: Action, node: str | None, step: MoveStep
) -> None:
    assert move_step(Placement(assigned=assigned, target=target), Decision(action, node, "why")) == step


def test_a_deleted_routed_ip_is_released_once(routed_ip: Callable[..., RoutedIPState]) -> None:
    leaving = routed_ip("web", deleting=True, finalizers=(FINALIZER, "other/keep"))
    assert needs_release(leaving, FINALIZER, None)
    assert not needs_release(leaving, FINALIZER, leaving.uid), "the watch still shows the finalizer just removed"
    assert needs_release(leaving, FINALIZER, "uid-of-an-earlier-web"), "a new object of the same name is released"
    assert not needs_release(routed_ip("web", deleting=True, finalizers=("other/keep",)), FINALIZER, None)


def test_an_event_is_worth_posting_when_the_ready_status_or_reason_changes_not_the_message() -> None:
    previous = {"type": "Ready", "status": "True", "reason": "CoolingDown", "message": "a is cordoned; 9 s"}
    assert not is_news(previous, "True", "CoolingDown"), "the cool-down's seconds counting down"
    assert is_news(previous, "False", "NoEligibleNode")
    assert is_news(previous, "True", "Assigned")
    assert is_news({}, "False", "Conflict"), "the first condition"


def test_the_move_is_announced_from_and_to_where() -> None:
    assert moving_message("203.0.113.5", None, "b") == "assigning 203.0.113.5 to b"
    assert moving_message("203.0.113.5", "a", "b") == "moving 203.0.113.5 from a to b"
    assert assigned_message("203.0.113.5", "b", "a") == "203.0.113.5 assigned to b (was on a)"
    assert assigned_message("203.0.113.5", "b", None) == "203.0.113.5 assigned to b"
    assert assigned_message("203.0.113.5", "b", "b") == "203.0.113.5 assigned to b", "a resumed move to the holder"


def test_a_failure_is_reported_in_the_providers_words_and_retried_when_it_asks() -> None:
    refused = ProviderError("Droplet already has a reserved IP", reason="AssignRefused")
    limited = ProviderError("429 Too Many Requests", reason="RateLimited", retry_after=7.0)
    assert failure_reason(refused) == "AssignRefused"
    assert failure_reason(RuntimeError("boom")) == "ReconcileError"
    assert provider_retry_after(limited) == 7.0
    assert provider_retry_after(refused) is None, "the key's own backoff"
    assert provider_retry_after(RuntimeError("boom")) is None


def test_a_class_is_accepted_or_refused_for_its_first_problem_with_every_message() -> None:
    accepted = acceptance(LOCAL_CLASS, [])
    assert accepted.condition == ("True", "Valid", "provider local")
    assert accepted.event == ("Normal", "Accepted", "the class can be served")
    problems = [("SecretOutOfReach", "spec.fromSecretsRef[0].namespace: ..."), ("MissingJobTemplate", "spec.x: ...")]
    refused = acceptance(LOCAL_CLASS, problems)
    message = "spec.fromSecretsRef[0].namespace: ...; spec.x: ..."
    assert refused.condition == ("False", "SecretOutOfReach", message)
    assert refused.event == ("Warning", "SecretOutOfReach", message)


def test_the_move_taint_is_added_once_and_removed_alone() -> None:
    assert with_move_taint([FOREIGN_TAINT]) == [FOREIGN_TAINT, MOVE_TAINT]
    assert with_move_taint([FOREIGN_TAINT, MOVE_TAINT]) is None, "already there: nothing to write"
    assert without_move_taint([MOVE_TAINT, FOREIGN_TAINT]) == [FOREIGN_TAINT]
    assert without_move_taint([FOREIGN_TAINT]) is None, "not there: nothing to write"


def test_the_move_taint_stays_while_another_move_heads_to_the_node(routed_ip: Callable[..., RoutedIPState]) -> None:
    first = routed_ip("first", ip="203.0.113.5", assigned="a", target="b")
    second = routed_ip("second", ip="203.0.113.6", target="b")
    leaving = routed_ip("leaving", ip="203.0.113.7", target="c", deleting=True)
    assert heading_to("b", [first, second], excluding=first.key), "the second move still heads there"
    assert not heading_to("b", [first], excluding=first.key), "the move that finished does not count"
    assert not heading_to("c", [leaving]), "a RoutedIP being deleted moves nowhere"
    assert not heading_to("a", [first, second]), "a holder is no move's target"
