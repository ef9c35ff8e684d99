"""The chaos suite: faults injected, one after another, into ONE running system (tests/chaos/conftest.py), each
followed by the checks a user would make, timed. Every check waits for its condition within a generous bound and
is recorded in the table printed at the end of the run (fault | what was checked | recovered in | lost); a check
that does not recover in time, or anything lost, fails its row.

The rows run in file order and share the system: each leaves it converged for the next.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.testing.chaos import (
    NAMESPACE,
    SERVICES,
    TABLE,
    System,
    create_goop,
    do_actions,
    droplet,
    goop_completed,
    held_tunnels,
    listener,
    listeners,
    placed,
    ready_reason,
    routed_ip,
    routed_status,
    serves,
    tunnels_lost,
    unless_retryable,
    virtual_service,
)
from tollgate.testing.faultproxy import Mode, break_the_network
from tollgate.testing.wait import eventually
from tollgate.testing.xds import GROUP, PLURAL, VERSION, port_taken, read_vs

T = TypeVar("T")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

FREEZE_SECONDS = 45
BOUND = 90  # seconds a check may take to recover: generous; the waits end as soon as the condition holds
ROUTED_IP = "203.0.113.50"
SECOND_ROUTED_IP = "203.0.113.51"
CONTESTED_IP = "203.0.113.52"
REGISTRATIONS = 40
STILL_RUNNING = "every service still runs: none exited by itself"


def as_coroutine(probe: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    async def run() -> T:
        return probe()

    return run


# ----- what a user looks at (the rest is tollgate.testing.chaos) -----
async def register(system: System, address: str, node: str, timeout: float = 5) -> int | None:
    """The tunnel ID the allocator answers a registration with; None when the call failed in a retryable way."""
    agent = system.allocator_agent
    async with AllocatorClient(f"127.0.0.1:{system.allocator_port}", agent.token, agent.channel_credentials()) as api:
        response = await unless_retryable(
            api.register(system.account, "lb", address, 8080, node_address=node, timeout=timeout)
        )
    return None if response is None else int(response.tunnel.tunnel_id)


# ----- the rows -----
@pytest.fixture(scope="module")
async def baseline(system: System) -> System:
    """The system at work before the faults: RoutedIP web placed on a node, VirtualService steady served."""
    routed_ip(system, "web", ROUTED_IP)
    virtual_service(system, "steady", 3100)
    await eventually(as_coroutine(lambda: placed(system, "web", ROUTED_IP)), "RoutedIP web placed", BOUND)
    await eventually(lambda: serves(system, 3100), "the VirtualService steady served", BOUND)
    return system


async def test_kube_apiserver_frozen_for_45_s(baseline: System) -> None:
    """SIGSTOP of the real kube-apiserver for 45 s, then SIGCONT: every service converges again by itself."""
    fault = f"kube-apiserver SIGSTOP {FREEZE_SECONDS} s, SIGCONT"
    system = baseline
    node = placed(system, "web", ROUTED_IP)
    actions_before = do_actions(system, ROUTED_IP)

    thawed = await system.freeze_api_server(FREEZE_SECONDS)
    await TABLE.recover(
        fault, "the API server answers /readyz", lambda: asyncio.to_thread(system.cluster.is_ready), thawed, BOUND
    )
    create_goop(system, "after-the-freeze")
    virtual_service(system, "thawed", 3101)
    await asyncio.gather(
        TABLE.recover(
            fault,
            "a new Goop's Jobs get pods and the Goop completes",
            lambda: goop_completed(system, "after-the-freeze"),
            thawed,
            BOUND,
        ),
        TABLE.recover(
            fault,
            "a VirtualService created after the thaw is served by a real Envoy",
            lambda: serves(system, 3101),
            thawed,
            BOUND,
        ),
        TABLE.recover(
            fault,
            "the allocator registers an endpoint",
            lambda: register(system, "127.77.60.1", "127.77.60.100"),
            thawed,
            BOUND,
        ),
    )
    lost = [] if placed(system, "web", ROUTED_IP) == node else [f"RoutedIP web left {node}"]
    lost += [] if await serves(system, 3100) else ["the VirtualService served before the freeze"]
    if do_actions(system, ROUTED_IP) != actions_before:
        lost.append(f"DigitalOcean actions during the freeze: {do_actions(system, ROUTED_IP)[len(actions_before) :]}")
    TABLE.lost(
        fault,
        "what ran before: the RoutedIP on its node (no new provider action), the old VirtualService",
        thawed,
        lost,
    )
    TABLE.lost(fault, STILL_RUNNING, thawed, system.exited())


async def test_api_connections_half_open_while_the_cluster_changes(baseline: System) -> None:
    """Every service's connections to the API server hang (FREEZE_OPEN: as after a NAT lost its state) while a
    VirtualService is deleted, the node holding the routed IP goes NotReady and a Goop is created: each service
    gives its hung connections up by itself and acts on what changed meanwhile."""
    system = baseline
    fault = "every service's API connections half-open"
    virtual_service(system, "doomed", 3102)
    await eventually(lambda: serves(system, 3102), "the VirtualService doomed served", BOUND)
    holder = await eventually(as_coroutine(lambda: placed(system, "web", ROUTED_IP)), "RoutedIP web placed", BOUND)
    system.set_proxies(Mode.FREEZE_OPEN)
    frozen = time.monotonic()
    try:
        system.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "doomed")
        await asyncio.to_thread(system.nodes.hold_not_ready, holder)
        create_goop(system, "half-open")
        virtual_service(system, "half-open", 3106)

        async def doomed_gone() -> bool:
            return listener("doomed") not in await listeners(system)

        moved = await asyncio.gather(
            TABLE.recover(
                fault, "a VirtualService deleted meanwhile leaves Envoy's config", doomed_gone, frozen, BOUND
            ),
            TABLE.recover(
                fault,
                f"a node gone NotReady meanwhile loses the routed IP (DigitalOcean moves it off {holder})",
                lambda: placed(system, "web", ROUTED_IP, avoid=holder),
                frozen,
                BOUND,
            ),
            TABLE.recover(
                fault, "a VirtualService created meanwhile is served", lambda: serves(system, 3106), frozen, BOUND
            ),
            TABLE.recover(
                fault, "a Goop created meanwhile completes", lambda: goop_completed(system, "half-open"), frozen, BOUND
            ),
        )
        lost = [] if await serves(system, 3100) else ["the VirtualService steady"]
        lost += [] if placed(system, "web", ROUTED_IP) == moved[1] else ["the routed IP's new place"]
        TABLE.lost(fault, "what ran before: the other VirtualService, one holder of the routed IP", frozen, lost)
        TABLE.lost(fault, STILL_RUNNING, frozen, system.exited())
    finally:
        system.set_proxies(Mode.PASS)
        await asyncio.to_thread(system.nodes.restore)


async def test_each_service_sigkilled_and_started_again(baseline: System) -> None:
    """SIGKILL of each service in turn; what a user changed while it was down is done once the test (as a kubelet
    would) has started it again, and what it had done before is kept."""
    system = baseline
    for name in SERVICES:
        fault = f"SIGKILL of {name}, started again"
        running = await listeners(system)  # what Envoy runs before the kill, to be kept through it
        system.services[name].kill()
        killed = time.monotonic()
        if name == "xds":
            virtual_service(system, "while-xds-down", 3103)
            serving = await serves(system, 3100)
            await asyncio.to_thread(system.restart, name)
            await TABLE.recover(
                fault,
                "a VirtualService created while it was down is served",
                lambda: serves(system, 3103),
                killed,
                BOUND,
            )

            async def intact(running: set[str] = running) -> bool:
                return running <= await listeners(system) and await serves(system, 3100)

            await TABLE.recover(fault, "Envoy's config re-served intact", intact, killed, BOUND)
            TABLE.lost(
                fault, "Envoy kept serving while xds was down", killed, [] if serving else ["traffic while down"]
            )
        elif name == "jobs":
            create_goop(system, "while-jobs-down", jobs=2)
            await asyncio.to_thread(system.restart, name)
            await TABLE.recover(
                fault,
                "a Goop created while it was down completes",
                lambda: goop_completed(system, "while-jobs-down"),
                killed,
                BOUND,
            )
        elif name == "routedip":
            node = placed(system, "web", ROUTED_IP)
            before = do_actions(system, ROUTED_IP)
            routed_ip(system, "web-2", SECOND_ROUTED_IP)
            await asyncio.to_thread(system.restart, name)
            await TABLE.recover(
                fault,
                "a RoutedIP created while it was down is placed",
                lambda: placed(system, "web-2", SECOND_ROUTED_IP),
                killed,
                BOUND,
            )
            lost = [] if placed(system, "web", ROUTED_IP) == node else [f"RoutedIP web left {node}"]
            lost += (
                [f"new actions on a placed IP: {do_actions(system, ROUTED_IP)[len(before) :]}"]
                if do_actions(system, ROUTED_IP) != before
                else []
            )
            TABLE.lost(fault, "a placed RoutedIP stays assigned once on DigitalOcean", killed, lost)
        else:
            held = held_tunnels(system)
            await asyncio.to_thread(system.restart, name)
            got = await TABLE.recover(
                fault,
                "a new registration gets a tunnel ID",
                lambda: register(system, "127.77.61.1", "127.77.61.100"),
                killed,
                BOUND,
            )
            TABLE.lost(
                fault,
                "earlier tunnels kept, no ID held twice",
                killed,
                tunnels_lost(system, {**held, "127.77.61.100": got}),
            )
        TABLE.lost(fault, STILL_RUNNING, killed, system.exited())


async def test_registrations_through_dropped_answers_and_a_sigkilled_allocator(system: System) -> None:
    """Registrations of new client nodes while the allocator's API answers keep getting lost, and the allocator is
    SIGKILLed midway and started again: every registration gets a tunnel ID, no ID is held by two nodes."""
    fault = "allocator: API answers dropped + SIGKILL midway"
    nodes = [(f"127.77.{100 + index}.1", f"127.77.{100 + index}.100") for index in range(REGISTRATIONS)]
    returned: dict[str, int] = {}
    gate = asyncio.Semaphore(8)
    halfway, done = asyncio.Event(), asyncio.Event()

    async def register_one(address: str, node: str) -> None:
        async with gate:
            returned[node] = await eventually(
                lambda: register(system, address, node), f"a tunnel ID for {node}", BOUND, interval=0.2
            )
        if len(returned) >= REGISTRATIONS // 3:
            halfway.set()

    async def kill_and_restart() -> None:
        await halfway.wait()
        system.services["allocator"].kill()
        await asyncio.to_thread(system.restart, "allocator")  # the network keeps breaking meanwhile

    started = time.monotonic()
    breaking = asyncio.create_task(break_the_network(system.proxies["allocator"], done, seed=16, calm=(1, 2)))
    registering = asyncio.gather(kill_and_restart(), *(register_one(*pair) for pair in nodes))
    try:
        await TABLE.recover(
            fault,
            f"each of {REGISTRATIONS} registrations gets a tunnel ID",
            lambda: len(returned) == len(nodes),
            started,
            BOUND * 2,
        )
        await registering
    finally:
        done.set()
        rounds = await breaking
        system.proxies["allocator"].set_mode(Mode.PASS)
    assert rounds and system.proxies["allocator"].dropped_bytes, "the allocator lost answers"
    await TABLE.recover(
        fault,
        "the load balancer's status records every node's tunnel",
        lambda: set(returned) <= set(held_tunnels(system)),
        started,
        BOUND * 2,
    )
    TABLE.lost(
        fault, "no tunnel ID held twice, each node holds the ID it was given", started, tunnels_lost(system, returned)
    )
    TABLE.lost(fault, STILL_RUNNING, started, system.exited())


def programmed_reason(system: System, name: str) -> str | None:
    """The reason of the VirtualService's Programmed condition, for its latest generation."""
    obj = read_vs(system.custom, NAMESPACE, name)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    return next((str(c["reason"]) for c in status.get("conditions", []) if c["type"] == "Programmed"), None)


async def test_a_nacked_virtual_service_does_not_hold_the_others_back(baseline: System) -> None:
    """Envoy cannot bind a port another process holds: it NACKs that listener. The VirtualService says so, and
    the others on the same Envoy keep converging."""
    system = baseline
    fault = "Envoy NACKs a VirtualService (port taken)"
    with port_taken(system.cluster, system.envoy_container, 3104):
        virtual_service(system, "nacked", 3104)
        applied = time.monotonic()
        await TABLE.recover(
            fault,
            "the NACKed one reports Programmed=False, reason Rejected",
            lambda: programmed_reason(system, "nacked") == "Rejected",
            applied,
            BOUND,
        )
        virtual_service(system, "after-nack", 3105)
        await TABLE.recover(
            fault,
            "a VirtualService applied after it is served by the same Envoy",
            lambda: serves(system, 3105),
            applied,
            BOUND,
        )
        lost = [] if await serves(system, 3100) else ["port 3100"]
        TABLE.lost(fault, "the others on that Envoy keep serving", applied, lost)
        TABLE.lost(fault, STILL_RUNNING, applied, system.exited())
    system.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "nacked")


async def test_two_routed_ips_claim_one_ip(system: System) -> None:
    """Two RoutedIPs of one address, created back to back (the webhook, judging from its cache, can let both in):
    the older holds it, the newer reports the conflict, and DigitalOcean sees one assignment."""
    fault = "two RoutedIPs claim one IP"
    routed_ip(system, "a-first", CONTESTED_IP)
    routed_ip(system, "b-second", CONTESTED_IP)  # named to sort second should both be created within one second
    created = time.monotonic()
    node = await TABLE.recover(
        fault, "the older one holds the IP", lambda: placed(system, "a-first", CONTESTED_IP), created, BOUND
    )
    await TABLE.recover(
        fault,
        "the newer one reports Ready=False, reason Conflict",
        lambda: ready_reason(routed_status(system, "b-second")) == ("False", "Conflict"),
        created,
        BOUND,
    )
    actions = do_actions(system, CONTESTED_IP)
    lost = [] if actions == [("assign", droplet(node))] else [f"DigitalOcean saw {actions}"]
    TABLE.lost(fault, "DigitalOcean sees one assignment", created, lost)
    TABLE.lost(fault, STILL_RUNNING, created, system.exited())
