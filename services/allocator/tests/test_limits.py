"""Account limits without a cluster: which LoadBalancers and GWProxies the allocator serves, and a model of racing
deciders that share the Account's record through conditional writes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tollgate.allocator import limits
from tollgate.allocator.limits import RULES, AccountLimit, Decision, Holder, decide
from tollgate.models.epic import AccountStatus

LB = RULES["LoadBalancer"]
NAMESPACE = "epic-acme"


def holder(name: str, second: int = 0, uid: str | None = None, deleting: bool = False) -> Holder:
    return Holder(f"2026-01-01T00:00:{second:02d}Z", name, uid or f"uid-{name}", deleting)


def account(limit: int, *served: Holder) -> AccountLimit:
    return AccountLimit("acme", NAMESPACE, limit, {h.name: h.uid for h in served})


def test_an_object_in_the_record_is_served_and_nothing_is_written() -> None:
    web = holder("web")
    decision = decide(LB, account(1, web), web, [web, holder("other")])
    within = "within the limit: Account acme's spec.loadBalancerLimit is 1"
    assert decision == Decision(True, {"web": "uid-web"}, within)


def test_counted_within_the_limit_every_object_fits_and_the_candidate_is_recorded() -> None:
    web = holder("web")
    decision = decide(LB, account(2, holder("old")), web, None)
    assert decision.served
    assert decision.record == {"old": "uid-old", "web": "uid-web"}


def test_of_six_created_at_once_with_room_for_one_the_oldest_is_served_whichever_is_judged() -> None:
    six = [holder(f"lb-{i}", second=10 - i) for i in range(6)]  # lb-5 is the oldest
    decisions = {candidate.name: decide(LB, account(1), candidate, six) for candidate in six}
    assert [name for name, decision in decisions.items() if decision.served] == ["lb-5"]
    assert decisions["lb-5"].record == {"lb-5": "uid-lb-5"}
    assert all(decision.record == {} for name, decision in decisions.items() if name != "lb-5"), "only the candidate"


def test_the_oldest_go_first_then_the_name_then_the_uid() -> None:
    same_second = [holder("b", uid="1"), holder("a", uid="9"), holder("a", uid="2", second=0)]
    ordered = sorted(same_second)
    assert [(h.name, h.uid) for h in ordered] == [("a", "2"), ("a", "9"), ("b", "1")]
    older = holder("z", second=0)
    younger = holder("a", second=1)
    assert not decide(LB, account(1), younger, [younger, older]).served
    assert decide(LB, account(1), older, [younger, older]).served


def test_the_message_names_the_account_the_limit_field_and_value_and_how_many_exist() -> None:
    six = [holder(f"lb-{i}", second=i) for i in range(6)]
    decision = decide(LB, account(1, six[0]), six[3], six)
    assert not decision.served
    assert decision.message == (
        "Account acme's spec.loadBalancerLimit is 1, and namespace epic-acme holds 6 LoadBalancers, 1 of them served"
    )
    proxies = [holder("gwp-a"), holder("gwp-b", second=1)]
    refused = decide(RULES["GWProxy"], account(1, proxies[0]), proxies[1], proxies)
    assert refused.message == (
        "Account acme's spec.proxyLimit is 1, and namespace epic-acme holds 2 GWProxies, 1 of them served"
    )


def test_a_served_object_keeps_its_place_against_older_ones_and_a_lowered_limit() -> None:
    young, old = holder("young", second=9), holder("old", second=1)
    assert decide(LB, account(1, young), old, [young, old]).served is False, "a place is never taken back"
    lowered = decide(LB, account(0, young), young, [young, old])
    assert lowered.served, "a lowered limit stops none that is served"
    assert not decide(LB, account(0, young), old, [young, old]).served


def test_the_entry_of_an_object_that_is_gone_holds_no_place_and_the_oldest_waiting_gets_it() -> None:
    gone, first, second = holder("gone"), holder("first", second=1), holder("second", second=2)
    assert decide(LB, account(1, gone), second, [first, second]) == Decision(
        False,
        {"gone": "uid-gone"},
        "Account acme's spec.loadBalancerLimit is 1, and namespace epic-acme holds 2 LoadBalancers, 0 of them served; "
        "the free places (1) go to older LoadBalancers first",
    )
    served = decide(LB, account(1, gone), first, [first, second])
    assert (served.served, served.record) == (True, {"gone": "uid-gone", "first": "uid-first"})


def test_an_object_recreated_under_a_served_name_is_not_served_by_the_old_entry() -> None:
    old = holder("web", uid="old")
    new = holder("web", uid="new", second=5)
    other = holder("other", second=1)
    assert not decide(LB, account(1, old), new, [new, other]).served, "the older one waiting goes first"
    assert decide(LB, account(1, old), other, [new, other]).served


def test_an_object_being_deleted_keeps_its_place_but_never_gets_one() -> None:
    leaving = holder("leaving", deleting=True)
    waiting = holder("waiting", second=3)
    assert not decide(LB, account(1, leaving), waiting, [leaving, waiting]).served
    unserved = holder("unserved", deleting=True)
    assert decide(LB, account(1), waiting, [unserved, waiting]).record == {"waiting": "uid-waiting"}


def test_a_limit_unset_is_the_default_and_the_record_lives_in_the_account_status() -> None:
    assert LB.limit({}) == 100
    assert RULES["GWProxy"].limit({"proxyLimit": 3}) == 3
    status = AccountStatus()
    LB.record_in(status, {"web": "uid-web"})
    assert status.to_wire()["served-load-balancers"] == {"web": "uid-web"}
    assert limits.served("LoadBalancer", {"status": status.to_wire()}) == {"web": "uid-web"}
    assert limits.served("GWProxy", None) == {}


def test_holders_are_read_from_an_objects_metadata() -> None:
    obj = {"metadata": {"name": "web", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    assert limits.holder_of(obj) == Holder("2026-01-01T00:00:00Z", "web", "u")
    assert limits.holder_of({"metadata": {**obj["metadata"], "deletionTimestamp": "x"}}).deleting


# A model of the allocator's deciders: each reads the Account (its record and resourceVersion), then counts or lists
# the namespace, and writes the record only if the Account is unchanged since its read (409 otherwise). Objects are
# created and deleted between any two steps; a deletion drops the object's entry as the DELETED handler does.


@dataclass
class World:
    limit: int
    objects: dict[str, Holder] = field(default_factory=dict)
    record: dict[str, str] = field(default_factory=dict)
    version: int = 0
    created: itertools.count[int] = field(default_factory=itertools.count)

    def create(self) -> None:
        number = next(self.created)
        name = f"lb-{number:02d}"
        self.objects[name] = holder(name, second=number // 3)  # three a second: ties broken by name

    def delete(self, pick: int, missed: bool) -> None:
        """Delete an object; its entry goes too unless no allocator saw the deletion (`missed`)."""
        if not self.objects:
            return
        name = sorted(self.objects)[pick % len(self.objects)]
        gone = self.objects.pop(name)
        if not missed and self.record.get(name) == gone.uid:
            self.record = {n: u for n, u in self.record.items() if n != name}
            self.version += 1

    def served(self) -> set[str]:
        return {name for name, uid in self.record.items() if name in self.objects and self.objects[name].uid == uid}

    def judge(self, candidate: Holder, record: dict[str, str]) -> Decision:
        """A decision on `record` as read, with the namespace as it is now: counted, or listed when over the limit."""
        present = list(self.objects.values())
        judged = AccountLimit("acme", NAMESPACE, self.limit, record)
        return decide(LB, judged, candidate, None if len(present) <= self.limit else present)


@dataclass
class Decider:
    candidate: Holder | None = None
    read: tuple[int, dict[str, str]] | None = None
    decision: Decision | None = None


ACTION = st.one_of(
    st.tuples(st.just("create"), st.integers(0, 0)),
    st.tuples(st.just("delete"), st.integers(0, 2)),
    st.tuples(st.sampled_from(["read", "judge", "write"]), st.integers(0, 2)),
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 3), actions=st.lists(st.tuples(ACTION, st.integers(0, 50)), max_size=60))
def test_racing_deciders_never_serve_more_than_the_limit_nor_take_a_place_back(
    limit: int, actions: list[tuple[tuple[str, int], int]]
) -> None:
    world = World(limit)
    deciders = [Decider() for _ in range(3)]
    for (verb, which), pick in actions:
        before = world.served()
        if verb == "create":
            world.create()
        elif verb == "delete":
            world.delete(pick, missed=which == 1)
        elif verb == "read" and world.objects:
            deciders[which] = Decider(world.objects[sorted(world.objects)[pick % len(world.objects)]])
            deciders[which].read = (world.version, dict(world.record))
        elif verb == "judge" and (d := deciders[which]).read is not None and d.candidate is not None:
            d.decision = world.judge(d.candidate, d.read[1])
        elif verb == "write" and (d := deciders[which]).decision is not None and d.read is not None:
            if d.read[0] == world.version and d.decision.record != d.read[1]:
                world.record, world.version = d.decision.record, world.version + 1
            deciders[which] = Decider()
        now = world.served()
        assert len(now) <= limit, f"{sorted(now)} served with a limit of {limit}"
        assert before - now <= before - world.objects.keys(), "only a deleted object loses its place"
    # Once each is judged in turn, exactly the ones that fit are served.
    for candidate in sorted(world.objects.values()):
        world.record = world.judge(candidate, world.record).record
    assert len(world.served()) == min(limit, len(world.objects))
