"""tollgate-routedip end to end, on the embedded cluster, under exactly the permissions of its rbac.yaml.

A RoutedIP lands on the youngest eligible node; a node that goes NotReady, is cordoned, is deleted, or
loses its backing pod gives the IP up to another; the Job provider's Jobs run to completion and a failing
one is retried and reported; a controller that crashes midway through a move leaves exactly one holder;
the DigitalOcean provider drives a fake DigitalOcean API (a real HTTP server) through reserved IP actions
and the firewall; of two RoutedIPs of one address the older holds it and the newer takes over after it.
Nodes are simulated by KWOK, which keeps them Ready: a ValidatingAdmissionPolicy holds a labelled node
NotReady (it refuses any status write that would make it Ready again).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from tollgate.models.routedip import GROUP, VERSION
from tollgate.routedip.providers import local
from tollgate.routedip.providers.job import CLASS_LABEL
from tollgate.testing.cluster import EmbeddedCluster, node_manifest
from tollgate.testing.fakedo import FakeDigitalOcean, FakeDigitalOceanThread
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.nodes import HOLD_POLICY_OBJECTS, Nodes, node_ready
from tollgate.testing.objects import config_map_data
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for

SYSTEM_NAMESPACE = "tollgate-system"
WORKERS = ("tollgate-worker-0", "tollgate-worker-1", "tollgate-worker-2")
YOUNG_NODE = "routedip-e2e-young"


@pytest.fixture(scope="module")
def hold_policy(cluster: EmbeddedCluster) -> Iterator[None]:
    objects = yaml.safe_dump_all(HOLD_POLICY_OBJECTS)  # one policy for the module: it enforces a moment after creation
    cluster.kubectl("apply", "-f", "-", stdin=objects)
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=objects)


@pytest.fixture
def nodes(cluster: EmbeddedCluster, core: client.CoreV1Api, hold_policy: None) -> Iterator[Nodes]:
    touched = Nodes(cluster, core)
    yield touched
    touched.restore()


@pytest.fixture
def young_node(cluster: EmbeddedCluster, core: client.CoreV1Api) -> Iterator[str]:
    """A fourth node, younger than the cluster's three (removed afterwards: other tests expect three)."""
    manifest = node_manifest(3)
    manifest["metadata"]["name"] = YOUNG_NODE
    manifest["metadata"]["labels"] = {**manifest["metadata"]["labels"], "kubernetes.io/hostname": YOUNG_NODE}
    manifest["metadata"]["labels"].pop("type")
    manifest["spec"]["providerID"] = "digitalocean://400009"
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    wait_for(
        lambda: node_ready(core, YOUNG_NODE), f"node {YOUNG_NODE} Ready", timeout=30, ignore=(client.ApiException,)
    )
    yield YOUNG_NODE
    cluster.kubectl("delete", "node", YOUNG_NODE, "--ignore-not-found", "--wait=false")


# ----- the controller and its objects -----
class Controller:
    """tollgate-routedip as a subprocess, authenticated as its chart's ServiceAccount (exactly rbac.yaml)."""

    def __init__(self, run_service: ServiceFactory) -> None:
        self.run_service = run_service
        self.process: ServiceProcess | None = None

    def start(self, **env: str) -> ServiceProcess:
        self.process = self.run_service(
            "routedip",
            rbac=True,
            env={"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE, "TOLLGATE_ROUTEDIP_LOG_FORMAT": "text", **env},
        )
        return self.process

    def running(self) -> bool:
        return self.process is not None and self.process.process is not None and self.process.process.poll() is None


@pytest.fixture
def controller(
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    namespace: str,
    make_class: Callable[..., str],
) -> Iterator[Controller]:
    running = Controller(run_service)
    yield running
    # Release the test's RoutedIPs while a controller runs, or their finalizers keep the namespace alive.
    if not running.running():
        running.start()
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, "routedips")
    wait_for(
        lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "routedips")["items"],
        "the test's RoutedIPs to be released",
        timeout=60,
    )
    cluster.kubectl("delete", "configmap", "-n", SYSTEM_NAMESPACE, "-l", local.LABEL, "--ignore-not-found")


@pytest.fixture
def make_class(custom: client.CustomObjectsApi) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(provider: str = "local", **spec: Any) -> str:
        name = f"e2e-{provider}-{uuid.uuid4().hex[:6]}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterRoutedIPClass",
            "metadata": {"name": name},
            "spec": {"className": name, "provider": provider, "moveCooldownSeconds": 0, **spec},
        }
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", body)
        created.append(name)
        return name

    yield make
    for name in created:
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", name)


def make_service(core: client.CoreV1Api, namespace: str, *, local: bool = False) -> int:
    """A NodePort Service `web` selecting `app: web`; returns its node port."""
    spec: dict[str, Any] = {
        "type": "NodePort",
        "selector": {"app": "web"},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
    }
    if local:
        spec["externalTrafficPolicy"] = "Local"
    service = core.create_namespaced_service(namespace, {"metadata": {"name": "web"}, "spec": spec})  # type: ignore[arg-type]
    return int(str(service.spec.ports[0].node_port))


def make_pod(core: client.CoreV1Api, namespace: str, name: str, node: str, *host_ports: int) -> None:
    ports = [client.V1ContainerPort(container_port=8080 + i, host_port=p) for i, p in enumerate(host_ports)]
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "web"}),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="web", image="nginx", ports=ports)]),
    )
    core.create_namespaced_pod(namespace, pod)


def make_routed_ip(
    custom: client.CustomObjectsApi, namespace: str, class_name: str, ip: str, name: str = "web"
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RoutedIP",
        "metadata": {"name": name},
        "spec": {"className": class_name, "routedIP": ip, "serviceRef": {"serviceName": "web", "namespace": namespace}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", body)


def status(custom: client.CustomObjectsApi, namespace: str, name: str = "web") -> dict[str, Any]:
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", name)
    assert isinstance(obj, dict)
    return dict(obj.get("status") or {})


def ready(state: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in state.get("conditions") or [] if c["type"] == "Ready"), {})


def wait_assigned(custom: client.CustomObjectsApi, namespace: str, node: str, name: str = "web") -> dict[str, Any]:
    def assigned() -> dict[str, Any] | None:
        state = status(custom, namespace, name)
        done = (
            state.get("assignedNode") == node and not state.get("targetNode") and ready(state).get("status") == "True"
        )
        return state if done else None

    return wait_for(assigned, f"RoutedIP {name} assigned to {node}", timeout=30)


def holders(core: client.CoreV1Api, ip: str) -> list[str]:
    """The nodes the local provider recorded the IP on."""
    return sorted(config_map_data(core, local.ip_config_map(ip), SYSTEM_NAMESPACE))


def firewall_record(core: client.CoreV1Api, class_name: str) -> dict[str, set[str]]:
    data = config_map_data(core, local.firewall_config_map(class_name), SYSTEM_NAMESPACE)
    return {node: set(ports.split(",")) for node, ports in data.items()}


def events(core: client.CoreV1Api, namespace: str, reason: str) -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event(namespace).items if e.reason == reason]


def converges(probe: Callable[[], object], expected: object, timeout: float = 30) -> None:
    """The controller's last steps (unassigning the old holder, closing its firewall) follow the status it
    reports: wait until what the provider recorded converges, then it must equal `expected` exactly."""
    wait_for(lambda: probe() == expected, f"the provider's record to become {expected!r}", timeout=timeout)


def has_move_taint(core: client.CoreV1Api, node: str) -> bool:
    return any(t.key == "routedip.tollgate.io/move-in-progress" for t in core.read_node(node).spec.taints or [])


# ----- tests -----
def test_lands_on_the_youngest_node_and_moves_when_it_goes_not_ready_or_is_cordoned(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: Controller,
    make_class: Callable[..., str],
    nodes: Nodes,
    young_node: str,
) -> None:
    ip = "203.0.113.11"
    class_name = make_class()
    node_port = make_service(core, namespace)
    controller.start()
    make_routed_ip(custom, namespace, class_name, ip)

    first = wait_assigned(custom, namespace, young_node)
    assert any(f"{young_node} is the youngest" in e.message for e in events(core, namespace, "Elected"))
    converges(lambda: holders(core, ip), [young_node])
    converges(lambda: firewall_record(core, class_name), {young_node: {f"tcp/{node_port}"}})

    nodes.hold_not_ready(young_node)
    # The cluster's three nodes are the same age: the name that sorts last is the youngest.
    moved = wait_assigned(custom, namespace, "tollgate-worker-2")
    converges(lambda: holders(core, ip), ["tollgate-worker-2"])
    converges(lambda: firewall_record(core, class_name), {"tollgate-worker-2": {f"tcp/{node_port}"}})
    assert moved["lastMoveTime"] >= first["lastMoveTime"]
    failover = [e for e in events(core, namespace, "Elected") if young_node in e.message and "NotReady" in e.message]
    assert failover and failover[0].type == "Warning"

    nodes.cordon("tollgate-worker-2")
    wait_assigned(custom, namespace, "tollgate-worker-1")
    converges(lambda: holders(core, ip), ["tollgate-worker-1"])
    # The move's taint comes off once the controller's node cache shows it: converged, not necessarily at once.
    wait_for(lambda: not any(has_move_taint(core, n) for n in WORKERS), "the move taints to be removed", timeout=30)
    assert any("cordoned" in e.message for e in events(core, namespace, "Elected"))


def test_a_deleted_node_gives_up_its_ip(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: Controller,
    make_class: Callable[..., str],
    young_node: str,
) -> None:
    ip = "203.0.113.12"
    class_name = make_class()
    make_service(core, namespace)
    controller.start()
    make_routed_ip(custom, namespace, class_name, ip)
    wait_assigned(custom, namespace, young_node)
    core.delete_node(young_node)
    wait_assigned(custom, namespace, "tollgate-worker-2")
    converges(lambda: holders(core, ip), ["tollgate-worker-2"])


def test_local_traffic_follows_the_backing_pod_with_its_ports(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: Controller,
    make_class: Callable[..., str],
) -> None:
    ip = "203.0.113.13"
    class_name = make_class()
    node_port = make_service(core, namespace, local=True)
    # 8443 is outside the node-port range, 30500 inside it: only 8443 needs a firewall rule.
    make_pod(core, namespace, "web-a", "tollgate-worker-0", 8443, 30500)
    make_pod(core, namespace, "web-b", "tollgate-worker-1", 9443)
    controller.start()
    make_routed_ip(custom, namespace, class_name, ip)

    wait_assigned(custom, namespace, "tollgate-worker-1")
    converges(lambda: firewall_record(core, class_name), {"tollgate-worker-1": {f"tcp/{node_port}", "tcp/9443"}})

    core.delete_namespaced_pod("web-b", namespace)
    wait_assigned(custom, namespace, "tollgate-worker-0")
    converges(lambda: holders(core, ip), ["tollgate-worker-0"])
    wait_for(
        lambda: firewall_record(core, class_name) == {"tollgate-worker-0": {f"tcp/{node_port}", "tcp/8443"}},
        "the firewall record to follow the IP",
        timeout=10,
    )


JOB_TEMPLATE = {
    "backoffLimit": 0,
    "template": {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "update", "image": "busybox", "command": ["sh", "-c", "echo $ACTION $ROUTED_IP"]}],
        }
    },
}


def test_the_job_provider_runs_jobs_and_retries_a_failing_one(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: Controller,
    make_class: Callable[..., str],
) -> None:
    batch = client.BatchV1Api(core.api_client)
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)  # its Secret precedes the controller
    secret = f"routedip-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_secret(
        SYSTEM_NAMESPACE, client.V1Secret(metadata=client.V1ObjectMeta(name=secret), string_data={"token": "t"})
    )
    # No node matches the selector: the Job never runs a pod and fails at its deadline.
    failing = json.loads(json.dumps(JOB_TEMPLATE))
    failing["activeDeadlineSeconds"] = 1
    failing["template"]["spec"]["nodeSelector"] = {"routedip.tollgate.io/nowhere": "true"}
    class_name = make_class(
        "job",
        updateRoutedIP=failing,
        updateFirewall=JOB_TEMPLATE,
        fromSecretsRef=[{"name": secret, "namespace": SYSTEM_NAMESPACE}],
    )
    uid = custom.get_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", class_name)["metadata"]["uid"]
    make_service(core, namespace)
    try:
        controller.start()
        make_routed_ip(custom, namespace, class_name, "203.0.113.14")

        def assign_job() -> client.V1Job | None:
            jobs = batch.list_namespaced_job(SYSTEM_NAMESPACE, label_selector=f"{CLASS_LABEL}={uid}").items
            return next((j for j in jobs if j.metadata.labels["routedip.tollgate.io/action"] == "assign"), None)

        job = wait_for(assign_job, "the assign Job", timeout=30)
        container = job.spec.template.spec.containers[0]
        env = {e.name: e.value for e in container.env}
        assert env["ACTION"] == "assign" and env["ROUTED_IP"] == "203.0.113.14"
        assert env["NODE_NAME"] == "tollgate-worker-2" and env["NODE_ID"] == "400002"
        assert container.env_from[0].secret_ref.name == secret
        assert job.metadata.owner_references[0].uid == uid

        failed = wait_for(lambda: events(core, namespace, "JobFailed"), "a JobFailed Event", timeout=30)
        assert "DeadlineExceeded" in failed[0].message and "retrying in" in failed[0].message
        assert ready(status(custom, namespace))["reason"] == "JobFailed"

        fixed = {"activeDeadlineSeconds": None, "template": {"spec": {"nodeSelector": None}}}
        custom.patch_cluster_custom_object(
            GROUP, VERSION, "clusterroutedipclasses", class_name, {"spec": {"updateRoutedIP": fixed}}
        )
        wait_assigned(custom, namespace, "tollgate-worker-2")
        wait_for(
            lambda: not batch.list_namespaced_job(SYSTEM_NAMESPACE, label_selector=f"{CLASS_LABEL}={uid}").items,
            "the finished Jobs to be cleaned up",
            timeout=30,
        )
    finally:
        core.delete_namespaced_secret(secret, SYSTEM_NAMESPACE)


@pytest.mark.parametrize("failpoint", ["after-assign", "after-unassign"])
def test_a_crash_midway_through_a_move_ends_with_exactly_one_holder(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: Controller,
    make_class: Callable[..., str],
    nodes: Nodes,
    failpoint: str,
) -> None:
    ip = "203.0.113.15"
    class_name = make_class()
    make_service(core, namespace)
    first = controller.start()
    make_routed_ip(custom, namespace, class_name, ip)
    wait_assigned(custom, namespace, "tollgate-worker-2")
    first.kill()

    crashing = controller.start(TOLLGATE_ROUTEDIP_FAILPOINTS=failpoint)
    nodes.hold_not_ready("tollgate-worker-2")
    assert crashing.process is not None
    assert crashing.process.wait(timeout=30) == 86, "the controller crashed at the failpoint"
    midway = status(custom, namespace)
    assert (midway["assignedNode"], midway["targetNode"]) == ("tollgate-worker-2", "tollgate-worker-1")
    expected_holders = (
        ["tollgate-worker-1", "tollgate-worker-2"] if failpoint == "after-assign" else ["tollgate-worker-1"]
    )
    assert holders(core, ip) == expected_holders

    controller.start()
    wait_assigned(custom, namespace, "tollgate-worker-1")
    converges(lambda: holders(core, ip), ["tollgate-worker-1"])
    wait_for(
        lambda: not has_move_taint(core, "tollgate-worker-1"), "the move taint to leave tollgate-worker-1", timeout=30
    )


@dataclass
class DigitalOcean:
    fake: FakeDigitalOcean
    secrets: list[dict[str, str]]  # a class's fromSecretsRef: the Secret holding the fake's token

    def actions(self, ip: str) -> list[tuple[str, int | None]]:
        """The reserved IP actions DigitalOcean carried out on `ip`, in order: (assign/unassign, droplet)."""
        return [(a.type, a.droplet) for a in list(self.fake.actions.values()) if a.ip == ip]


@pytest.fixture
def digitalocean(cluster: EmbeddedCluster, core: client.CoreV1Api) -> Iterator[DigitalOcean]:
    """The fake DigitalOcean API, knowing the cluster's three droplets, and its token in a Secret. A test asks for
    it before `controller`, so that the controller's teardown still reaches it to release the test's IPs."""
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    secret = "digitalocean-token"  # the controller may read the chart's tokenSecrets only
    token = base64.b64encode(b"e2e-token").decode()
    core.create_namespaced_secret(
        SYSTEM_NAMESPACE, client.V1Secret(metadata=client.V1ObjectMeta(name=secret), data={"token": token})
    )
    try:
        with FakeDigitalOceanThread("e2e-token") as fake:
            fake.add_droplets(400000, 400001, 400002)
            yield DigitalOcean(fake, [{"name": secret, "namespace": SYSTEM_NAMESPACE}])
    finally:
        core.delete_namespaced_secret(secret, SYSTEM_NAMESPACE)


def test_the_digitalocean_provider_assigns_reserved_ips_and_opens_the_firewall(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    digitalocean: DigitalOcean,
    controller: Controller,
    make_class: Callable[..., str],
    nodes: Nodes,
) -> None:
    ip = "203.0.113.16"
    fake = digitalocean.fake
    fake.add_reserved_ip(ip)
    fake.add_firewall("fw-e2e")
    secrets = digitalocean.secrets
    settings = {"apiURL": fake.url, "firewallID": "fw-e2e"}
    class_name = make_class("digitalocean", fromSecretsRef=secrets, digitalocean=settings)
    greedy = make_class("digitalocean", fromSecretsRef=secrets, digitalocean=settings, perNodeIPLimit=2)
    node_port = make_service(core, namespace)
    fake.inject(429, method="POST", path="/actions", headers={"Retry-After": "1"})
    controller.start(**digitalocean.fake.trust_settings())
    make_routed_ip(custom, namespace, class_name, ip)
    make_routed_ip(custom, namespace, greedy, "203.0.113.17", name="greedy")

    wait_assigned(custom, namespace, "tollgate-worker-2")
    assert fake.reserved_ips[ip] == 400002
    firewall = fake.firewalls["fw-e2e"]
    assert firewall.droplet_ids == {400002}
    assert [(r["protocol"], r["ports"]) for r in firewall.inbound_rules] == [("tcp", str(node_port))]

    nodes.hold_not_ready("tollgate-worker-2")
    wait_assigned(custom, namespace, "tollgate-worker-1")
    assert fake.reserved_ips[ip] == 400001
    wait_for(lambda: firewall.droplet_ids == {400001}, "the firewall to follow the IP", timeout=10)

    def refused() -> dict[str, Any] | None:
        condition = ready(status(custom, namespace, "greedy"))
        return condition if condition.get("reason") == "ClassNotAccepted" else None

    condition = wait_for(refused, "the greedy RoutedIP to be refused", timeout=30)
    assert "spec.perNodeIPLimit: DigitalOcean allows 1 reserved IP per droplet; got 2" in condition["message"]
    greedy_class = custom.get_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", greedy)
    accepted = next(c for c in greedy_class["status"]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "PerNodeIPLimitUnsupported")
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", "web")
    wait_for(lambda: fake.reserved_ips[ip] is None, "the IP to be unassigned on deletion", timeout=30)
    wait_for(lambda: not firewall.droplet_ids, "the firewall to be emptied on deletion", timeout=10)


def test_two_routed_ips_of_one_address_the_older_holds_it_and_the_newer_takes_over(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    digitalocean: DigitalOcean,
    controller: Controller,
    make_class: Callable[..., str],
) -> None:
    """Two RoutedIPs ask for one address: the older holds it, the newer is `Ready=False`, reason Conflict
    (naming the older, with a Warning Event) and touches nothing; when the older is deleted, the newer
    takes the address over. DigitalOcean sees one assignment per holder, never a tug of war.

    The webhook refuses a second RoutedIP for an address, but it judges from a cache that can lag behind
    a create made a moment earlier: that is how two get in on a running system. This module runs without
    the webhook (nothing registers it on the test cluster), so the second create goes straight in."""
    ip = "203.0.113.18"
    fake = digitalocean.fake
    fake.add_reserved_ip(ip)
    class_name = make_class("digitalocean", fromSecretsRef=digitalocean.secrets, digitalocean={"apiURL": fake.url})
    make_service(core, namespace)
    controller.start(**digitalocean.fake.trust_settings())

    make_routed_ip(custom, namespace, class_name, ip, name="a-first")
    wait_assigned(custom, namespace, "tollgate-worker-2", "a-first")
    # Named so that the older also sorts first should both be created within one second.
    make_routed_ip(custom, namespace, class_name, ip, name="b-second")

    def conflict() -> dict[str, Any] | None:
        condition = ready(status(custom, namespace, "b-second"))
        return condition if condition.get("reason") == "Conflict" else None

    condition = wait_for(conflict, "the newer RoutedIP to report the conflict", timeout=30)
    assert condition["status"] == "False"
    assert f"spec.routedIP: {ip} is already routed by RoutedIP a-first" in condition["message"]
    wait_for(
        lambda: [e for e in events(core, namespace, "Conflict") if e.involved_object.name == "b-second"],
        "a Conflict Event on the newer RoutedIP",
        timeout=10,
    )
    warning = next(e for e in events(core, namespace, "Conflict") if e.involved_object.name == "b-second")
    assert warning.type == "Warning"
    assert digitalocean.actions(ip) == [("assign", 400002)], "the newer RoutedIP assigned nothing"
    assert fake.reserved_ips[ip] == 400002
    loser = status(custom, namespace, "b-second")
    assert not loser.get("assignedNode") and not loser.get("targetNode")
    assert ready(status(custom, namespace, "a-first"))["status"] == "True"

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", "a-first")
    wait_assigned(custom, namespace, "tollgate-worker-2", "b-second")
    assert digitalocean.actions(ip) == [("assign", 400002), ("unassign", None), ("assign", 400002)]
    assert fake.reserved_ips[ip] == 400002
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", "b-second")
    wait_for(lambda: fake.reserved_ips[ip] is None, "the IP to be unassigned on deletion", timeout=30)


def test_a_newer_routed_ip_placed_before_the_older_was_seen_gives_the_address_up(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    digitalocean: DigitalOcean,
    controller: Controller,
    make_class: Callable[..., str],
) -> None:
    """The other half of the race: the controller placed the newer RoutedIP because the older one had not
    reached its cache yet. Here that state is written while no controller runs (the newer one recorded on
    tollgate-worker-1, which DigitalOcean agrees holds the address); the controller then finds the older
    claim, unassigns the newer one's node, clears its placement and reports Conflict, and only after that
    assigns the address for the older one. Without the webhook, as above."""
    ip = "203.0.113.19"
    fake = digitalocean.fake
    fake.add_reserved_ip(ip, droplet=400001)
    class_name = make_class("digitalocean", fromSecretsRef=digitalocean.secrets, digitalocean={"apiURL": fake.url})
    make_service(core, namespace)
    make_routed_ip(custom, namespace, class_name, ip, name="a-first")
    make_routed_ip(custom, namespace, class_name, ip, name="b-second")
    placed = {"assignedNode": "tollgate-worker-1"}
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "routedips", "b-second", {"status": placed})
    controller.start(**digitalocean.fake.trust_settings())

    wait_assigned(custom, namespace, "tollgate-worker-2", "a-first")
    loser = status(custom, namespace, "b-second")
    assert (ready(loser)["status"], ready(loser)["reason"]) == ("False", "Conflict")
    assert not loser.get("assignedNode") and not loser.get("targetNode")
    assert digitalocean.actions(ip) == [("unassign", None), ("assign", 400002)], "the newer let go first"
    assert fake.reserved_ips[ip] == 400002
