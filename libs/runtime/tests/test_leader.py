"""Leader election on a real API server: one holder at a time, hand-over, crash take-over, loss detected."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.leaderelection import leaderelection

from tollgate.runtime.kube import api_client
from tollgate.runtime.leader import EXIT_LEASE_LOST, LeaderElector, LeaseConfig, LeaseLost
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import Mode, api_server_proxy
from tollgate.testing.wait import eventually

DURATION = 4.0
# For the two tests whose bound is the lease's own timing (the holder gone before a standby could take over): the
# stop margin is a sixth of the duration, the time a holder may be late by, so 6 s leaves 1 s for the scheduling
# delays of a loaded 2-core machine (a thread or the event loop woken late, a process reaped late); 4 s left 0.67.
LONG_DURATION = 6.0


def elector(kube: client.ApiClient, namespace: str, identity: str, duration: float = DURATION) -> LeaderElector:
    return LeaderElector(kube, LeaseConfig(namespace, "probe", identity, duration))


def lease_spec(kube: client.ApiClient, namespace: str) -> client.V1LeaseSpec:
    spec = client.CoordinationV1Api(kube).read_namespaced_lease("probe", namespace).spec
    assert spec is not None
    return spec


async def test_a_renewing_holder_keeps_the_lease_and_hands_it_over_when_it_stops(
    kube: client.ApiClient, namespace: str
) -> None:
    first, second = elector(kube, namespace, "first"), elector(kube, namespace, "second")
    first_stop, second_stop = asyncio.Event(), asyncio.Event()
    assert await first.acquire(first_stop)
    keeping = asyncio.create_task(first.keep(first_stop))
    standby = asyncio.create_task(second.acquire(second_stop))
    acquired_at = lease_spec(kube, namespace).acquire_time
    # Twice the lease duration: the holder renews, so the standby never takes over.
    renewals: set[object] = set()
    deadline = time.monotonic() + 2 * DURATION
    while time.monotonic() < deadline:
        spec = lease_spec(kube, namespace)
        assert spec.holder_identity == "first" and not standby.done()
        renewals.add(spec.renew_time)
        await asyncio.sleep(0.5)
    assert len(renewals) >= 3, "the holder renews the Lease every duration / 5"

    first_stop.set()
    await keeping
    await first.release()
    assert await asyncio.wait_for(standby, DURATION), "a released Lease is taken at the standby's next retry"
    spec = lease_spec(kube, namespace)
    assert (spec.holder_identity, spec.lease_transitions) == ("second", 1)
    assert spec.acquire_time is not None and acquired_at is not None and spec.acquire_time > acquired_at


async def test_a_crashed_holder_is_replaced_only_once_its_lease_has_run_out(
    kube: client.ApiClient, namespace: str
) -> None:
    crashed, standby = elector(kube, namespace, "crashed"), elector(kube, namespace, "standby")
    assert await crashed.acquire(asyncio.Event())  # and then never renews nor releases
    last_renewal = lease_spec(kube, namespace).renew_time
    assert await asyncio.wait_for(standby.acquire(asyncio.Event()), 4 * DURATION)
    spec = lease_spec(kube, namespace)
    assert spec.holder_identity == "standby" and spec.lease_transitions == 1
    assert spec.acquire_time is not None and last_renewal is not None
    assert spec.acquire_time - last_renewal >= timedelta(seconds=DURATION)


async def test_replicas_racing_for_a_free_lease_elect_exactly_one(kube: client.ApiClient, namespace: str) -> None:
    electors = [elector(kube, namespace, f"replica-{index}") for index in range(5)]
    won = await asyncio.gather(*(candidate.try_acquire() for candidate in electors))
    assert sum(won) == 1
    assert lease_spec(kube, namespace).holder_identity == f"replica-{won.index(True)}"


async def test_a_holder_whose_lease_was_taken_learns_it_has_lost_it(kube: client.ApiClient, namespace: str) -> None:
    holder = elector(kube, namespace, "holder")
    stop = asyncio.Event()
    assert await holder.acquire(stop)
    leases = client.CoordinationV1Api(kube)
    lease = leases.read_namespaced_lease("probe", namespace)
    assert lease.spec is not None
    lease.spec.holder_identity = "intruder"
    leases.replace_namespaced_lease("probe", namespace, lease)
    with pytest.raises(LeaseLost, match="now held by intruder"):
        await asyncio.wait_for(holder.keep(stop), 2 * DURATION)
    await holder.release()
    assert lease_spec(kube, namespace).holder_identity == "intruder", "a replica releases only its own Lease"


class SteppedClock:
    """The wall clock, stepped forward by `offset` seconds (as NTP may step it)."""

    offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


async def test_a_standby_whose_clock_steps_forward_does_not_take_over_a_renewed_lease(
    kube: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LeaseConfig(namespace, "probe", "holder", duration=60)
    holder = LeaderElector(kube, config)
    standby = LeaderElector(kube, dataclasses.replace(config, identity="standby"))
    assert await holder.try_acquire()
    clock = SteppedClock()
    monkeypatch.setattr(leaderelection, "time", clock)  # the library times expiry with time.time()
    assert not await standby.try_acquire(timeout=DURATION)
    clock.offset = 10 * config.duration
    assert not await standby.try_acquire(timeout=DURATION), "the record changed less than a duration ago"
    assert lease_spec(kube, namespace).holder_identity == "holder"


def test_a_lease_shorter_than_two_seconds_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 s"):
        LeaseConfig("ns", "probe", "me", duration=1)


async def test_a_holder_cut_off_by_a_frozen_connection_gives_up_by_its_renew_deadline(
    kube: client.ApiClient, cluster: EmbeddedCluster, namespace: str, tmp_path: Path
) -> None:
    """A stalled connection answers nothing, not even an error: each renewal must end on its own."""
    with api_server_proxy(cluster.kubeconfig, tmp_path) as (proxy, kubeconfig):
        holder = elector(api_client(kubeconfig), namespace, "holder", LONG_DURATION)
        config = holder.config
        stop = asyncio.Event()
        assert await holder.acquire(stop)
        acquired = lease_spec(kube, namespace).renew_time
        keeping = asyncio.create_task(holder.keep(stop))

        async def renewed() -> bool:
            return lease_spec(kube, namespace).renew_time != acquired

        await eventually(renewed, "a renewal through the proxy", timeout=config.duration)
        proxy.set_mode(Mode.FREEZE)
        frozen_at = time.monotonic()
        with pytest.raises(LeaseLost, match="within the renew deadline"):
            await asyncio.wait_for(keeping, 2 * config.duration)
        lost_after = time.monotonic() - frozen_at
        proxy.set_mode(Mode.PASS)
    # The bound is the behaviour: the holder gives up by its renew deadline after its last renewal, and must have
    # stopped acting a stop margin later, before a standby could take over at the duration. Timed from the freeze
    # (after that renewal), giving up by renew deadline + stop margin is what the design allows; the stop margin
    # (1 s here) is also what absorbs a late wake-up on a loaded machine. A renewal that hung on the frozen
    # connection would not end by then at all (wait_for would time out instead).
    assert lost_after <= config.renew_deadline + config.stop_margin, (
        f"gave up {lost_after:.2f} s after the freeze: later than the renew deadline plus the stop margin"
    )
    assert config.renew_deadline + config.stop_margin < config.duration


BLOCKED_HOLDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from tollgate.runtime.kube import api_client
    from tollgate.runtime.leader import LeaderElector, LeaseConfig

    async def main() -> None:
        config = LeaseConfig(sys.argv[2], "probe", "blocked", float(sys.argv[3]))
        holder = LeaderElector(api_client(Path(sys.argv[1])), config)
        assert await holder.acquire(asyncio.Event())
        with holder.watchdog():
            print("LEADING", flush=True)
            time.sleep(60)  # a handler that blocks the event loop: nothing async can stop it, nor renew

    asyncio.run(main())
    """
)


def blocked_holder(cluster: EmbeddedCluster, namespace: str, duration: float) -> subprocess.Popen[str]:
    """BLOCKED_HOLDER as a process of its own (a subprocess.Popen, whose poll() says at once whether it has exited)."""
    return subprocess.Popen(
        [sys.executable, "-c", BLOCKED_HOLDER, str(cluster.kubeconfig), namespace, str(duration)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_holder_that_cannot_stop_acting_is_ended_by_its_watchdog_before_a_standby_takes_over(
    kube: client.ApiClient, cluster: EmbeddedCluster, namespace: str
) -> None:
    """The bound is a standby's own takeover, not a wall-clock figure: once a standby has taken the Lease of the
    blocked holder over (at the lease duration, as it times it), the holder's process must already be gone, ended
    by its watchdog at renew deadline + stop margin. A watchdog that did not fire would leave it running for 60 s."""
    process = blocked_holder(cluster, namespace, LONG_DURATION)
    try:
        assert process.stdout is not None
        assert await asyncio.to_thread(process.stdout.readline) == "LEADING\n"
        standby = elector(kube, namespace, "standby", LONG_DURATION)
        assert await asyncio.wait_for(standby.acquire(asyncio.Event()), 4 * LONG_DURATION)
        # poll(), not wait(): a holder still running now would be acting beside the standby.
        assert process.poll() == EXIT_LEASE_LOST, "the blocked holder was still running when the standby took over"
        await standby.release()
    finally:
        process.kill()
        process.wait()
    assert (
        process.stderr is not None and "not stopped by the renew deadline plus the stop margin" in process.stderr.read()
    )
