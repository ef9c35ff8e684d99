"""Three allocators, a few hundred concurrent registrations across many load balancers, one allocator killed with
SIGKILL midway and restarted: every endpoint ends with a tunnel ID and no ID is held twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.models.epic import GROUP, VERSION
from tollgate.testing import agents
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import FaultProxy, break_the_network, server_of
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import allocator_env, tls_endpoint
from tollgate.testing.wait import eventually

ACCOUNTS, LBS_PER_ACCOUNT, ENDPOINTS_PER_LB = 4, 5, 15  # 300 endpoints on 160 client nodes of 20 load balancers
CONCURRENCY = 24
LEASE_SECONDS = 6
REGISTRATION_SECONDS = 300
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED}


def api_object(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture
def accounts(cluster: EmbeddedCluster) -> Iterator[list[str]]:
    names = [f"load-{uuid.uuid4().hex[:5]}" for _ in range(ACCOUNTS)]
    documents = []
    for name in names:
        namespace = f"epic-{name}"
        documents.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        documents.append(api_object("Account", name, namespace, {}))
        documents.append(api_object("LBServiceGroup", "web", namespace, {"envoy-replica-count": 0}))
        for index in range(LBS_PER_ACCOUNT):
            spec = {"public-ports": [{"port": 80}], "service-group": "web"}
            documents.append(api_object("LoadBalancer", f"lb-{index}", namespace, spec))
    cluster.kubectl("apply", "-f", "-", stdin="\n".join(json.dumps(d) for d in documents))
    yield names
    for name in names:
        cluster.kubectl("patch", "account", name, "-n", f"epic-{name}", "--type=merge", "-p",
                        '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        cluster.kubectl("delete", "namespace", f"epic-{name}", "--wait=false", check=False)


def metric(service: ServiceProcess, name: str) -> float:
    with urllib.request.urlopen(f"{service.health_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture
def proxies(cluster: EmbeddedCluster) -> Iterator[list[FaultProxy]]:
    """One FaultProxy in front of the API server per allocator."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(FaultProxy(*server_of(cluster.kubeconfig))) for _ in range(3)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("faulty_network", [False, True], ids=["clean-network", "responses-dropped"])
async def test_concurrent_registrations_survive_a_sigkilled_allocator_without_duplicate_ids(
    run_service: ServiceFactory,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    accounts: list[str],
    proxies: list[FaultProxy],
    faulty_network: bool,
    tmp_path: Path,
) -> None:
    """With `faulty_network`, each allocator reaches the API server through its own FaultProxy that keeps
    dropping answers to requests it forwarded and cutting the connections: writes whose outcome the allocator
    cannot know, the case where a tunnel ID could be handed out twice."""
    first = tls_endpoint(tmp_path / "allocator-tls")
    replicas = [first, first.on_free_port(), first.on_free_port()]  # three replicas, one certificate
    ca_file = first.ca_file
    run = uuid.uuid4().hex[:5]
    incarnations: Counter[int] = Counter()

    def start(index: int) -> ServiceProcess:
        incarnations[index] += 1
        env = allocator_env(
            replicas[index],
            TOLLGATE_ALLOCATOR_IDENTITY=f"test-{run}-{index}-{incarnations[index]}",
            TOLLGATE_ALLOCATOR_LEASE_SECONDS=str(LEASE_SECONDS),
            TOLLGATE_ALLOCATOR_RECONCILE="true" if index == 0 else "false",
            TOLLGATE_ALLOCATOR_LOG_LEVEL="INFO",
        )
        return run_service("allocator", rbac=True, env=env, via=proxies[index] if faulty_network else None)

    allocators = [start(index) for index in range(3)]
    agents_ = [agents.Agent.mint(core, account, ca_file) for account in accounts]
    clients = {
        agent.account: [
            AllocatorClient(endpoint.address, agent.token, agent.channel_credentials()) for endpoint in replicas
        ]
        for agent in agents_
    }

    # Two endpoints per client node: registered at once, through different allocators, they must share a tunnel.
    endpoints = [
        (account, f"lb-{lb}", f"127.77.{10 * a + lb}.{e + 1}", f"127.77.{10 * a + lb}.{200 + e // 2}")
        for a, account in enumerate(accounts)
        for lb in range(LBS_PER_ACCOUNT)
        for e in range(ENDPOINTS_PER_LB)
    ]
    returned: dict[str, int] = {}
    retried: Counter[str] = Counter()
    halfway = asyncio.Event()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def register(index: int, account: str, lb: str, address: str, node: str) -> None:
        async with gate:
            for attempt in range(60):
                api = clients[account][(index + attempt) % len(replicas)]
                try:
                    response = await api.register(account, lb, address, 8080, node_address=node, timeout=20)
                except grpc.aio.AioRpcError as error:
                    if error.code() not in RETRYABLE:
                        raise
                    retried[error.code().name] += 1
                    await asyncio.sleep(0.2)
                    continue
                returned[address] = response.tunnel.tunnel_id
                if len(returned) >= len(endpoints) // 3:
                    halfway.set()
                return
            raise AssertionError(f"{address}: no allocator registered it after 60 attempts")

    async def crash_and_restart() -> None:
        await halfway.wait()
        allocators[0].kill()  # the reconciling allocator, mid-run, in the middle of its block
        allocators[0] = await asyncio.to_thread(start, 0)  # the network keeps breaking meanwhile

    registered = asyncio.Event()

    async def register_all() -> None:
        await asyncio.gather(crash_and_restart(), *(register(i, *endpoint) for i, endpoint in enumerate(endpoints)))
        registered.set()

    breaking = [break_the_network(proxy, registered, seed) for seed, proxy in enumerate(proxies) if faulty_network]
    try:
        _, *rounds = await asyncio.wait_for(asyncio.gather(register_all(), *breaking), REGISTRATION_SECONDS)
    except TimeoutError:
        raise AssertionError(
            f"{len(returned)} of {len(endpoints)} endpoints registered in {REGISTRATION_SECONDS} s; "
            f"retried: {dict(retried)}"
        ) from None
    finally:
        for api in (api for per_account in clients.values() for api in per_account):
            await api.close()
    if faulty_network:
        assert all(rounds) and all(proxy.dropped_bytes for proxy in proxies), "every allocator lost answers"
    assert len(returned) == len(endpoints)
    per_node: dict[tuple[str, str, str], set[int]] = {}
    for account, lb, address, node in endpoints:
        per_node.setdefault((account, lb, node), set()).add(returned[address])
    assert [key for key, ids in per_node.items() if len(ids) != 1] == [], "endpoints of one node got different tunnels"
    node_ids = [next(iter(ids)) for ids in per_node.values()]
    assert Counter(node_ids).most_common(1)[0][1] == 1, "a tunnel ID was handed to two nodes"

    reps = custom.list_cluster_custom_object(GROUP, VERSION, "remoteendpoints")["items"]
    ours = {rep["spec"]["address"]: rep["status"]["tunnel-id"] for rep in reps if rep["spec"]["address"] in returned}
    assert ours == returned, "each endpoint's record holds the tunnel its registration returned"
    held = [rep["status"]["tunnel-id"] for rep in reps if (rep.get("status") or {}).get("tunnel-id")]
    wanted = {(f"epic-{account}", lb, node): tunnel_id for (account, lb, node), (tunnel_id,) in per_node.items()}

    async def statuses_complete() -> dict[tuple[str, str, str], int] | None:
        recorded: dict[tuple[str, str, str], int] = {}
        for account in accounts:
            for lb in custom.list_namespaced_custom_object(GROUP, VERSION, f"epic-{account}", "loadbalancers")["items"]:
                meta = lb["metadata"]
                for node, entry in ((lb.get("status") or {}).get("gue-tunnel-endpoints") or {}).items():
                    recorded[(meta["namespace"], meta["name"], node)] = entry["tunnel-id"]
        return recorded if recorded == wanted else None

    await eventually(statuses_complete, "every load balancer's status to list its nodes' tunnels", timeout=60)
    every_entry = [
        entry["tunnel-id"]
        for lb in custom.list_cluster_custom_object(GROUP, VERSION, "loadbalancers")["items"]
        for entry in ((lb.get("status") or {}).get("gue-tunnel-endpoints") or {}).values()
    ]
    assert [tid for tid, n in Counter(every_entry).items() if n > 1] == [], "load balancers hold a tunnel ID twice"

    epic = custom.get_namespaced_custom_object(GROUP, VERSION, "epic", "epics", "epic")
    assert epic["status"]["current-tunnel-id"] >= max(held)
    killed = f"test-{run}-0-1"

    async def dead_blocks_reclaimed() -> bool:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, "epic", "epics", "epic")["status"]
        return all(block["owner"] != killed for block in status.get("tunnel-id-blocks", []))

    await eventually(dead_blocks_reclaimed, "the killed allocator's block to be reclaimed", timeout=4 * LEASE_SECONDS)
    assert sum(metric(a, "tollgate_allocator_tunnel_ids_allocated_total") for a in allocators[1:]) > 0
    held_back = sum(a.logs().count("its write for node") for a in allocators)
    landed = sum(a.logs().count("a write whose answer was lost landed") for a in allocators)
    print(
        f"\n{len(returned)} endpoints on {len(per_node)} nodes registered; retried: {dict(retried)}; "
        f"rounds of dropped answers per allocator: {rounds}; in the surviving allocators, tunnel writes whose "
        f"answer was lost but which landed: {landed}, IDs held back after an uncertain write: {held_back}"
    )
