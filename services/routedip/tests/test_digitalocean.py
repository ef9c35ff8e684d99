"""The DigitalOcean provider against a fake DigitalOcean API served over real HTTP on 127.0.0.1:
asynchronous actions, 422s, 429 with Retry-After, the ratelimit-* window, 5xx, and the firewall."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tollgate.routedip.firewall import plan_firewall
from tollgate.routedip.providers import FirewallContext, NodeTarget, ProviderError, RoutedIPRef
from tollgate.routedip.providers.digitalocean import DigitalOceanClient, DigitalOceanProvider
from tollgate.routedip.state import NodeState, PodState, ServicePort, ServiceState, class_state
from tollgate.runtime.backoff import Backoff
from tollgate.testing.fakedo import FakeDigitalOcean

IP = "203.0.113.10"
REF = RoutedIPRef("web", "ingress", "uid-1", IP)
A, B, C = (NodeTarget(f"worker-{i}", f"digitalocean://{400000 + i}") for i in range(3))
NODES = {
    t.name: NodeState(t.name, datetime(2026, 1, 1, tzinfo=UTC), True, "Ready", provider_id=t.provider_id)
    for t in (A, B, C)
}
CLASS = class_state({"metadata": {"name": "do", "uid": "u"}, "spec": {"className": "do", "provider": "digitalocean"}})


@pytest.fixture
async def fake() -> AsyncIterator[FakeDigitalOcean]:
    server = FakeDigitalOcean(token="secret", action_polls=2)
    server.add_droplets(400000, 400001, 400002)
    server.add_reserved_ip(IP)
    server.add_reserved_ip("203.0.113.99")
    server.add_firewall("fw-1")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def client(fake: FakeDigitalOcean) -> AsyncIterator[DigitalOceanClient]:
    do = DigitalOceanClient(fake.url, "secret", attempts=4, backoff=Backoff(base=0.01, cap=0.1), poll_interval=0.01)
    yield do
    await do.close()


@pytest.fixture
def provider(client: DigitalOceanClient) -> DigitalOceanProvider:
    return DigitalOceanProvider(client, "fw-1")


async def test_assign_waits_for_the_action_to_complete(fake: FakeDigitalOcean, provider: DigitalOceanProvider) -> None:
    await provider.assign(REF, A, None)
    assert fake.reserved_ips[IP] == 400000
    assert [a.status for a in fake.actions.values()] == ["completed"]
    assert len(fake.calls("GET", f"/v2/reserved_ips/{IP}/actions/")) == 2, "polled until completed"


async def test_assigning_again_is_a_no_op_through_the_422(
    fake: FakeDigitalOcean, provider: DigitalOceanProvider
) -> None:
    await provider.assign(REF, A, None)
    await provider.assign(REF, A, None)
    assert fake.reserved_ips[IP] == 400000
    assert len(fake.actions) == 1


async def test_a_droplet_that_already_holds_an_ip_is_refused_clearly(
    fake: FakeDigitalOcean, provider: DigitalOceanProvider
) -> None:
    fake.reserved_ips["203.0.113.99"] = 400001
    with pytest.raises(ProviderError) as caught:
        await provider.assign(REF, B, None)
    assert caught.value.reason == "AssignRefused"
    assert "Droplet already has a reserved IP" in str(caught.value)
    assert "held by no droplet" in str(caught.value)


async def test_a_move_reassigns_and_unassigning_the_old_node_leaves_the_new_one(
    fake: FakeDigitalOcean, provider: DigitalOceanProvider
) -> None:
    await provider.assign(REF, A, None)
    await provider.assign(REF, B, A)
    await provider.unassign(REF, A)
    assert fake.reserved_ips[IP] == 400001
    assert not fake.calls("POST", f"/v2/reserved_ips/{IP}/actions")[2:], "no unassign action was sent"
    await provider.unassign(REF, B)
    assert fake.reserved_ips[IP] is None


async def test_429_waits_for_retry_after(fake: FakeDigitalOcean, provider: DigitalOceanProvider) -> None:
    fake.inject(429, method="POST", path="/actions", headers={"Retry-After": "1"}, message="Too many requests")
    await provider.assign(REF, A, None)
    posts = fake.calls("POST", "/actions")
    assert len(posts) == 2
    assert posts[1][0] - posts[0][0] >= 0.95
    assert fake.reserved_ips[IP] == 400000
    assert provider.client.rate_limited == 1


async def test_an_exhausted_rate_limit_window_is_waited_out(fake: FakeDigitalOcean, client: DigitalOceanClient) -> None:
    fake.exhaust_rate_limit(reset_in=1.0)
    await client.holder(IP)
    await client.holder(IP)
    first, second = fake.calls("GET", f"/v2/reserved_ips/{IP}")
    assert second[0] - first[0] >= 0.9


async def test_5xx_is_retried(fake: FakeDigitalOcean, provider: DigitalOceanProvider) -> None:
    fake.inject(503, method="POST", path="/actions", times=2)
    fake.inject(500, method="GET", path="/actions/", times=1)
    await provider.assign(REF, A, None)
    assert fake.reserved_ips[IP] == 400000
    assert len(fake.calls("POST", "/actions")) == 3


async def test_5xx_that_persists_gives_up_with_a_clear_error(
    fake: FakeDigitalOcean, provider: DigitalOceanProvider
) -> None:
    fake.inject(502, times=100, message="bad gateway")
    with pytest.raises(ProviderError) as caught:
        await provider.assign(REF, A, None)
    assert caught.value.reason == "ProviderUnavailable"
    assert "failed after 4 attempts: 502 bad gateway" in str(caught.value)


async def test_a_bad_token_is_reported(fake: FakeDigitalOcean) -> None:
    bad = DigitalOceanClient(fake.url, "wrong", backoff=Backoff(base=0.01, cap=0.1))
    try:
        with pytest.raises(ProviderError) as caught:
            await DigitalOceanProvider(bad, None).assign(REF, A, None)
    finally:
        await bad.close()
    assert caught.value.reason == "Unauthorized"


async def test_an_errored_action_is_reported(fake: FakeDigitalOcean, provider: DigitalOceanProvider) -> None:
    fake.actions_to_error = 1
    with pytest.raises(ProviderError) as caught:
        await provider.assign(REF, A, None)
    assert caught.value.reason == "ActionErrored"
    assert fake.reserved_ips[IP] is None


async def test_a_node_that_is_not_a_droplet_is_refused(provider: DigitalOceanProvider) -> None:
    with pytest.raises(ProviderError, match=r"spec.providerID 'aws:///us-east-1a/i-1' is not digitalocean://"):
        await provider.assign(REF, NodeTarget("aws-node", "aws:///us-east-1a/i-1"), None)


async def test_the_firewall_is_made_exactly_what_the_plan_lists(
    fake: FakeDigitalOcean, provider: DigitalOceanProvider
) -> None:
    stale_rule = {"protocol": "tcp", "ports": "1234", "sources": {"addresses": ["0.0.0.0/0", "::/0"]}}
    fake.firewalls["fw-1"].inbound_rules.append(stale_rule)
    fake.firewalls["fw-1"].droplet_ids.add(400002)
    service = ServiceState(
        "web",
        "ingress",
        {"app": "ingress"},
        True,
        (ServicePort("TCP", 80, 30080), ServicePort("UDP", 53, 30053)),
    )
    pods = [PodState("web", "p", {"app": "ingress"}, "worker-1", True, (("TCP", 443),))]
    plan = plan_firewall([(service, ["worker-0", "worker-1"])], pods, NODES, (30000, 32767))
    await provider.apply_firewall(plan, FirewallContext(CLASS))
    firewall = fake.firewalls["fw-1"]
    assert firewall.droplet_ids == {400000, 400001}
    assert sorted((r["protocol"], r["ports"]) for r in firewall.inbound_rules) == [
        ("tcp", "30080"),
        ("tcp", "443"),
        ("udp", "30053"),
    ]
    requests = len(fake.requests)
    await provider.apply_firewall(plan, FirewallContext(CLASS))
    assert len(fake.requests) == requests + 1, "applying the same plan again only reads the firewall"
    await provider.apply_firewall(plan_firewall([], [], NODES, (30000, 32767)), FirewallContext(CLASS))
    assert firewall.droplet_ids == set() and firewall.inbound_rules == []


async def test_a_missing_firewall_is_reported(client: DigitalOceanClient) -> None:
    with pytest.raises(ProviderError) as caught:
        await DigitalOceanProvider(client, "fw-missing").apply_firewall(
            plan_firewall([], [], NODES, (30000, 32767)), FirewallContext(CLASS)
        )
    assert caught.value.reason == "FirewallNotFound"


async def test_unassigning_from_a_deleted_node_leaves_the_ip_alone(
    fake: FakeDigitalOcean, provider: DigitalOceanProvider
) -> None:
    await provider.assign(REF, A, None)
    await provider.unassign(REF, NodeTarget("deleted-node"))
    assert fake.reserved_ips[IP] == 400000
