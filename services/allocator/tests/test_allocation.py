"""The allocation rules, without a cluster: the seed's counter, the block scheme's invariants, service IDs."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tollgate.allocator import allocation
from tollgate.allocator.allocation import SERVICE_ID_ALLOCATED, BlockPool, ExhaustedError, service_id_claim
from tollgate.models.epic import MAX_TUNNEL_ID, EPICStatus, TunnelIDBlock

NOW = "2026-01-01T00:00:00Z"
ACTIONS = ["take", "take", "take", "crash", "refill"]


def test_seed_step_hands_out_the_counter_plus_one() -> None:
    status = EPICStatus(current_tunnel_id=4)
    assert allocation.seed_step(status) == 5
    assert status.current_tunnel_id == 5


def test_seed_step_refuses_past_the_32_bit_range() -> None:
    with pytest.raises(ExhaustedError, match="current-tunnel-id"):
        allocation.seed_step(EPICStatus(current_tunnel_id=MAX_TUNNEL_ID))


def test_a_block_starts_after_the_counter_and_moves_it_to_its_end() -> None:
    status = EPICStatus(current_tunnel_id=10)
    block = allocation.reserve_block(status, "a", 64, None, NOW)
    assert (block.first, block.last, block.owner) == (11, 74, "a")
    assert status.current_tunnel_id == 74
    assert status.tunnel_id_blocks == [block]


def test_an_owner_holds_one_block_and_gone_owners_lose_their_records() -> None:
    status = EPICStatus()
    allocation.reserve_block(status, "a", 8, None, NOW)
    allocation.reserve_block(status, "b", 8, None, NOW)
    allocation.reserve_block(status, "a", 8, {"a", "b"}, NOW)
    assert [(b.owner, b.first) for b in status.tunnel_id_blocks] == [("b", 9), ("a", 17)]
    allocation.reserve_block(status, "c", 8, {"c", "a"}, NOW)
    assert [b.owner for b in status.tunnel_id_blocks] == ["a", "c"]
    gone = allocation.prune_blocks(status, {"c"})
    assert [b.owner for b in gone] == ["a"]
    assert status.current_tunnel_id == 32, "reclaiming a block never moves the counter back"


def test_the_last_block_is_cut_at_the_end_of_the_range() -> None:
    status = EPICStatus(current_tunnel_id=MAX_TUNNEL_ID - 3)
    block = allocation.reserve_block(status, "a", 64, None, NOW)
    assert (block.first, block.last) == (MAX_TUNNEL_ID - 2, MAX_TUNNEL_ID)
    with pytest.raises(ExhaustedError):
        allocation.reserve_block(status, "a", 64, None, NOW)


def test_pool_hands_out_its_block_then_asks_for_more() -> None:
    pool = BlockPool()
    assert pool.take() is None
    pool.refill(TunnelIDBlock(owner="a", first=5, last=7), "uid-1")
    assert [pool.take(), pool.take()] == [5, 6]
    pool.give_back(5)
    assert pool.remaining == 2
    assert [pool.take(), pool.take(), pool.take()] == [5, 7, None]


def test_pool_forgets_returned_ids_of_a_replaced_singleton() -> None:
    pool = BlockPool()
    pool.refill(TunnelIDBlock(owner="a", first=1, last=2), "uid-1")
    pool.give_back(pool.take() or 0)
    pool.refill(TunnelIDBlock(owner="a", first=3, last=4), "uid-2")
    assert [pool.take(), pool.take(), pool.take()] == [3, 4, None]
    pool.drop()
    assert pool.remaining == 0


class Store:
    """The API server's part of the protocol: a resourceVersion, and replace() that refuses stale writes."""

    def __init__(self) -> None:
        self.status = EPICStatus()
        self.version = 0

    def read(self) -> tuple[EPICStatus, int]:
        return self.status.model_copy(deep=True), self.version

    def replace(self, status: EPICStatus, version: int) -> bool:
        if version != self.version:
            return False
        self.status, self.version = status, self.version + 1
        return True


@settings(max_examples=200, deadline=None)
@given(
    owners=st.integers(min_value=1, max_value=6),
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(["take", "take", "take", "crash", "refill"])), max_size=300
    ),
    size=st.integers(min_value=1, max_value=16),
    seed=st.integers(0, 2**16),
)
def test_block_scheme_never_hands_an_id_out_twice_whatever_the_interleaving_and_crashes(
    owners: int, steps: list[tuple[int, str]], size: int, seed: int
) -> None:
    """Owners read the singleton, reserve blocks with conditional writes that may lose races, hand IDs out, crash
    (losing their pool), restart with a new name, and have their blocks reclaimed: every ID goes out at most once,
    and never at or below a counter value it was not reserved under."""
    rng = random.Random(seed)
    store = Store()
    names = [f"owner-{i}-0" for i in range(owners)]
    pools = [BlockPool() for _ in range(owners)]
    pending: list[tuple[EPICStatus, int] | None] = [None] * owners
    handed: list[int] = []
    for who, action in steps:
        who %= owners
        if action == "crash":
            generation = int(names[who].rsplit("-", 1)[1]) + 1
            names[who] = f"owner-{who}-{generation}"
            pools[who], pending[who] = BlockPool(), None
            continue
        if action == "refill" or pools[who].remaining == 0:
            if pending[who] is None:
                pending[who] = store.read()  # a read that may go stale before its write
                if rng.random() < 0.5:
                    continue
            status, version = pending[who]  # type: ignore[misc]
            pending[who] = None
            block = allocation.reserve_block(status, names[who], size, set(names), NOW)
            if store.replace(status, version):
                pools[who].refill(block, "uid")
            continue
        taken = pools[who].take()
        if taken is not None:
            handed.append(taken)
    assert allocation.duplicates(handed) == {}
    assert all(1 <= tunnel_id <= store.status.current_tunnel_id for tunnel_id in handed)
    blocks = sorted((b.first, b.last) for b in store.status.tunnel_id_blocks)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(blocks)), "recorded blocks never overlap"


def test_raise_floor_puts_the_counter_above_every_id_in_use_once() -> None:
    status = EPICStatus(current_tunnel_id=3)
    assert status.condition(allocation.INITIALIZED) is None
    assert allocation.raise_floor(status, 17)
    assert status.current_tunnel_id == 17
    assert status.condition(allocation.INITIALIZED).status == "True"
    assert not allocation.raise_floor(status, 5), "a lower floor changes nothing"
    assert status.current_tunnel_id == 17


def test_service_ids_skip_ids_set_by_hand_and_end_at_65535() -> None:
    assert allocation.next_service_id(0, []) == 1
    assert allocation.next_service_id(0, [1, 2, 4]) == 3
    with pytest.raises(ExhaustedError, match="current-service-id"):
        allocation.next_service_id(65535, [])


def test_remote_endpoint_names_are_deterministic_dns_names_per_address_port_and_protocol() -> None:
    name = allocation.remote_endpoint_name("sample-acnodal", "192.168.1.30", 8080, "TCP")
    assert name == "sample-acnodal-192-168-1-30-8080-tcp"
    assert allocation.remote_endpoint_name("sample-acnodal", "192.168.1.30", 8080, "UDP") != name
    assert allocation.remote_endpoint_name("sample-acnodal", "192.168.1.30", 8443, "TCP") != name
    long = allocation.remote_endpoint_name("x" * 250, "10.0.0.1", 80, "TCP")
    assert len(long) <= 253
    assert long == allocation.remote_endpoint_name("x" * 250, "10.0.0.1", 80, "TCP")
    assert long != allocation.remote_endpoint_name("x" * 250, "10.0.0.2", 80, "TCP")
    assert long != allocation.remote_endpoint_name("x" * 250, "10.0.0.1", 81, "TCP")


def test_valid_input_is_normalized() -> None:
    assert allocation.validate_address("node_address", "", required=False) is None
    assert allocation.validate_port("port", 8080, "") == (8080, "TCP")
    assert allocation.validate_name("account", "acme-widgets") == "acme-widgets"


def lb_claiming(name: str, created: str, allocated: bool) -> dict[str, Any]:
    conditions = [{"type": "Allocated", "status": "True", "reason": SERVICE_ID_ALLOCATED}] if allocated else []
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"conditions": conditions}}


def test_the_load_balancer_already_allocated_an_id_keeps_it_against_one_created_in_the_same_second() -> None:
    """Creation times have whole seconds: "late", created in the second "manual" was, sorts first by name, and
    took manual's hand-set ID (seen in CI). The one Allocated with the ID keeps it."""
    manual = lb_claiming("manual", "2026-11-26T08:26:50Z", allocated=True)
    late = lb_claiming("late", "2026-11-26T08:26:50Z", allocated=False)
    assert service_id_claim(manual) < service_id_claim(late)
    assert sorted([late, manual], key=service_id_claim)[0] is manual


def test_among_load_balancers_not_yet_allocated_the_oldest_claims_the_id_then_the_first_name() -> None:
    older = lb_claiming("zeta", "2026-11-26T08:26:49Z", allocated=False)
    newer = lb_claiming("alpha", "2026-11-26T08:26:50Z", allocated=False)
    same_second = lb_claiming("beta", "2026-11-26T08:26:50Z", allocated=False)
    assert sorted([same_second, newer, older], key=service_id_claim) == [older, newer, same_second]
    allocated_other_way = lb_claiming("gamma", "2026-11-26T08:26:51Z", allocated=False)
    allocated_other_way["status"]["conditions"] = [{"type": "Allocated", "status": "True", "reason": "Allocated"}]
    assert service_id_claim(older) < service_id_claim(allocated_other_way), "Allocated, but not with a service ID"
