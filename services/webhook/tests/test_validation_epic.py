"""The rules of epic.acnodal.io, kind by kind: what they accept and refuse, naming the field and the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tollgate.models import LoadBalancer
from tollgate.models.envoy import ADMIN_PORT
from tollgate.models.epic import GWPROXY_LABEL, LOAD_BALANCER_LABEL
from tollgate.testing.objects import Obj, named
from tollgate.webhook.validation import Limits, validate

Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


# ---- EPIC ----


def test_the_epic_singleton_is_accepted(check: Check, sample: Sample) -> None:
    assert check(sample("EPIC")) == []


@pytest.mark.parametrize(
    ("namespace", "name", "field"),
    [("epic", "other", "metadata.name"), ("default", "epic", "metadata.namespace")],
)
def test_only_epic_epic_may_exist(check: Check, sample: Sample, namespace: str, name: str, field: str) -> None:
    assert check(named(sample("EPIC"), name, namespace)) == [
        f"{field}: only epic/epic may exist, not {namespace}/{name}"
    ]


# ---- Account ----


def test_an_account_name_of_58_characters_makes_a_63_character_namespace(check: Check, sample: Sample) -> None:
    assert check(named(sample("Account"), "a" * 58)) == []


def test_an_account_name_too_long_for_its_namespace_is_refused(check: Check, sample: Sample) -> None:
    assert check(named(sample("Account"), "a" * 59)) == [
        f"metadata.name: the account's user namespace 'epic-{'a' * 59}' would be 64 characters, above the 63 of a "
        "namespace name: an account name has at most 58"
    ]


def test_an_account_name_with_a_dot_is_refused(check: Check, sample: Sample) -> None:
    (violation,) = check(named(sample("Account"), "acme.widgets"))
    assert violation.startswith("metadata.name: the account's user namespace 'epic-acme.widgets' is not a valid")


# ---- LoadBalancer and GWProxy ----


def test_the_seed_load_balancer_is_accepted_when_its_service_group_exists(
    check: Check, sample: Sample, group: Obj
) -> None:
    assert check(sample("LoadBalancer"), group) == []


def test_a_load_balancer_needs_its_service_group_in_its_namespace(check: Check, sample: Sample, group: Obj) -> None:
    elsewhere = named(group, "sample", "epic-other")
    assert check(sample("LoadBalancer"), elsewhere) == [
        "spec.service-group: LBServiceGroup 'sample' does not exist in the account's namespace epic-root"
    ]


def test_a_missing_service_group_is_pending_the_cache(sample: Sample, store_with: Callable[..., Any]) -> None:
    lb = sample("LoadBalancer")
    (violation,) = validate(
        LoadBalancer, lb, None, namespace="epic-root", name=lb["metadata"]["name"], view=store_with(), limits=Limits()
    )
    assert violation.pending


@pytest.mark.parametrize(
    "address", ["0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255"]
)
def test_a_public_address_must_be_unicast(check: Check, sample: Sample, group: Obj, address: str) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = address
    (violation,) = check(lb, group)
    assert violation.startswith(f"spec.public-address: {address} is not a unicast host address")


@pytest.mark.parametrize("address", ["192.168.77.2", "203.0.113.7", "127.0.0.10", "10.1.2.3"])
def test_unicast_public_addresses_are_accepted(check: Check, sample: Sample, group: Obj, address: str) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = address
    assert check(lb, group) == []


def test_a_public_address_must_be_an_ipv4_address(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = "192.168.77"
    assert check(lb, group) == ['spec.public-address: Input is not a valid IPv4 address (got "192.168.77")']


@pytest.mark.parametrize(("port", "rule"), [(0, "greater than or equal to 1"), (65536, "less than or equal to 65535")])
def test_ports_are_within_1_and_65535(check: Check, sample: Sample, group: Obj, port: int, rule: str) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"][0]["port"] = port
    assert check(lb, group) == [f"spec.public-ports[0].port: Input should be {rule} (got {port})"]


def test_duplicate_port_protocol_pairs_are_refused(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [
        {"port": 80, "protocol": "TCP"},
        {"port": 80, "protocol": "UDP"},
        {"port": 443},
        {"port": 80, "protocol": "TCP"},
    ]
    assert check(lb, group) == [
        "spec.public-ports[3]: duplicate port/protocol pair 80/TCP (spec.public-ports[0] has it too)"
    ]


def test_a_defaulted_protocol_counts_as_tcp(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [{"port": 53, "protocol": "TCP"}, {"port": 53}]
    assert check(lb, group) == [
        "spec.public-ports[1]: duplicate port/protocol pair 53/TCP (spec.public-ports[0] has it too)"
    ]


def test_duplicate_port_names_and_node_ports_are_refused(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [
        {"name": "web", "port": 80, "nodePort": 30080},
        {"name": "web", "port": 81, "nodePort": 30080},
    ]
    assert check(lb, group) == [
        "spec.public-ports[1].nodePort: duplicate nodePort 30080/TCP (spec.public-ports[0] has it too)",
        "spec.public-ports[1].name: duplicate port name 'web' (spec.public-ports[0] has it too)",
    ]


def test_a_target_port_is_an_integer_or_a_name(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"][0]["targetPort"] = 1.5
    assert check(lb, group) == ["spec.public-ports[0].targetPort: must be an integer or a string (got 1.5)"]


@pytest.mark.parametrize(("before", "after"), [(1, 2), (1, None)])
def test_the_service_id_is_immutable_once_set(
    check: Check, sample: Sample, group: Obj, before: int, after: int | None
) -> None:
    old = sample("LoadBalancer")
    old["spec"]["service-id"] = before
    new = sample("LoadBalancer")
    new["spec"].pop("service-id")
    if after is not None:
        new["spec"]["service-id"] = after
    assert check(new, group, old=old) == [
        f"spec.service-id: is immutable once set (was {before}, now {'unset' if after is None else after})"
    ]


def test_a_service_id_may_be_set_once_and_kept(check: Check, sample: Sample, group: Obj) -> None:
    unset = sample("LoadBalancer")
    unset["spec"].pop("service-id")
    assert check(sample("LoadBalancer"), group, old=unset) == []
    assert check(sample("LoadBalancer"), group, old=sample("LoadBalancer")) == []


def test_every_violation_is_reported_at_once(check: Check, sample: Sample) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = "0.0.0.0"
    lb["spec"]["public-ports"].append(dict(lb["spec"]["public-ports"][0]))
    assert [violation.split(":")[0] for violation in check(lb)] == [
        "spec.public-address",
        "spec.public-ports[1]",
        "spec.public-ports[1].nodePort",
        "spec.service-group",
    ]


def test_a_load_balancer_bounds_its_udp_sessions(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"].update({"udp-max-sessions": 2_000_000, "udp-idle-timeout": 0})
    assert check(lb, group) == [
        "spec.udp-max-sessions: Input should be less than or equal to 1048576 (got 2000000)",
        "spec.udp-idle-timeout: Input should be greater than or equal to 1000 (got 0)",
    ]
    lb["spec"].update({"udp-max-sessions": 100, "udp-idle-timeout": 86_400_000})
    assert check(lb, group) == []


def test_a_gateway_proxy_follows_the_load_balancer_rules(check: Check, sample: Sample, group: Obj) -> None:
    proxy = sample("GWProxy")
    assert check(proxy, group) == []
    proxy["spec"]["public-ports"].append({"name": "other", "port": 80})
    assert check(proxy, group) == [
        "spec.public-ports[1]: duplicate port/protocol pair 80/TCP (spec.public-ports[0] has it too)"
    ]


def gwproxy(sample: Sample, name: str, namespace: str = "epic-root") -> Obj:
    """A GWProxy without a public address (the allocator's to give), so that many can coexist."""
    proxy = named(sample("GWProxy"), name, namespace)
    del proxy["spec"]["public-address"]
    return proxy


def proxies(sample: Sample, count: int, namespace: str = "epic-root") -> list[Obj]:
    return [gwproxy(sample, f"proxy-{index}", namespace) for index in range(count)]


def test_an_account_holds_at_most_its_proxy_limit_of_gateway_proxies(check: Check, sample: Sample, group: Obj) -> None:
    account = sample("Account")
    account["spec"]["proxyLimit"] = 2
    new = gwproxy(sample, "third")
    assert check(new, group, account, *proxies(sample, 1)) == []
    assert check(new, group, account, *proxies(sample, 2)) == [
        "metadata.namespace: Account proxy limit exceeded: epic-root holds 2 GWProxies and Account root's "
        "spec.proxyLimit is 2"
    ]
    assert check(new, group, account, *proxies(sample, 2, "epic-other")) == [], "another account's proxies"
    stored = proxies(sample, 2)
    assert check(stored[0], group, account, *stored, old=stored[0]) == [], "an update is not a new proxy"


def test_without_an_account_the_default_proxy_limit_applies(check: Check, sample: Sample, group: Obj) -> None:
    assert check(gwproxy(sample, "new"), group, *proxies(sample, 19)) == []
    assert check(gwproxy(sample, "new"), group, *proxies(sample, 20)) == [
        "metadata.namespace: Account proxy limit exceeded: epic-root holds 20 GWProxies and the default "
        "proxyLimit (no Account) is 20"
    ]


def test_an_account_holds_at_most_its_load_balancer_limit(check: Check, sample: Sample, group: Obj) -> None:
    def load_balancer(name: str, namespace: str = "epic-root") -> Obj:
        lb = named(sample("LoadBalancer"), name, namespace)
        del lb["spec"]["public-address"]
        return lb

    account = sample("Account")
    account["spec"]["loadBalancerLimit"] = 2
    held = [load_balancer("one"), load_balancer("two")]
    assert check(load_balancer("third"), group, account, held[0]) == []
    assert check(load_balancer("third"), group, account, *held) == [
        "metadata.namespace: Account load balancer limit exceeded: epic-root holds 2 LoadBalancers and Account "
        "root's spec.loadBalancerLimit is 2"
    ]
    assert check(load_balancer("third"), group, account, *proxies(sample, 2)) == [], "GWProxies count apart"
    assert check(held[0], group, account, *held, old=held[0]) == [], "an update is not a new load balancer"


def test_one_object_per_public_address(check: Check, sample: Sample, group: Obj) -> None:
    other = named(sample("LoadBalancer"), "other", "epic-elsewhere")
    assert check(sample("LoadBalancer"), group, other) == [
        "spec.public-address: 192.168.77.2 is the public address of a LoadBalancer of another namespace already: one "
        "object per public address"
    ]
    moved = named(sample("LoadBalancer"), "other", "epic-elsewhere")
    moved["spec"]["public-address"] = "192.168.77.3"
    assert check(sample("LoadBalancer"), group, moved) == []


# ---- RemoteEndpoint and ServicePrefix ----


def test_one_remote_endpoint_per_address_port_and_protocol(check: Check, sample: Sample) -> None:
    first = named(sample("RemoteEndpoint"), "first")
    assert check(sample("RemoteEndpoint"), first) == [
        "spec: endpoint 192.168.1.30:8080/TCP of load balancer 'sample-acnodal' is registered already as "
        "RemoteEndpoint first: one RemoteEndpoint per address, port and protocol"
    ]
    assert check(first, first) == [], "its own stored version is no duplicate"
    other_port, other_protocol, elsewhere = sample("RemoteEndpoint"), sample("RemoteEndpoint"), sample("RemoteEndpoint")
    other_port["spec"]["port"]["port"] = 8443
    other_protocol["spec"]["port"]["protocol"] = "UDP"
    elsewhere["metadata"]["namespace"] = "epic-other"
    assert [check(e, first) for e in (other_port, other_protocol, elsewhere)] == [[], [], []]


IDENTITY = "is immutable: it is part of the endpoint's identity"


@pytest.mark.parametrize(
    ("path", "value", "violation"),
    [
        (("address",), "192.168.1.31", "spec.address: is immutable: it is part of the endpoint's identity "
         "(was 192.168.1.30, now 192.168.1.31); register a new endpoint instead"),
        (("port", "port"), 8443, f"spec.port.port: {IDENTITY} (was 8080, now 8443)"),
        (("port", "protocol"), "UDP", f"spec.port.protocol: {IDENTITY} (was TCP, now UDP)"),
        (("load-balancer",), "other", f"spec.load-balancer: {IDENTITY} (was sample-acnodal, now other)"),
    ],
)  # fmt: skip
def test_a_remote_endpoints_identity_is_immutable(
    check: Check, sample: Sample, path: tuple[str, ...], value: object, violation: str
) -> None:
    old, new = sample("RemoteEndpoint"), sample("RemoteEndpoint")
    target = new["spec"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (found,) = check(new, old=old)
    assert found.startswith(violation)
    changed = sample("RemoteEndpoint")
    changed["spec"]["port"]["name"] = "http"
    assert check(changed, old=old) == [], "the port's name is not part of the identity"


def test_a_service_prefix_lives_in_epic_and_its_pool_parses(check: Check, sample: Sample) -> None:
    assert check(sample("ServicePrefix")) == []
    assert check(named(sample("ServicePrefix"), "default", "epic-acme")) == [
        "metadata.namespace: ServicePrefixes live in namespace epic, not epic-acme"
    ]
    for pool, rule in (
        ("192.0.2.20-192.0.2.10", "the range ends before it starts"),
        ("192.0.2.0/33", "192.0.2.0/33"),
        ("somewhere", "is neither a CIDR nor a range"),
        ("198.51.100.0/28", "is not inside subnet 192.0.2.0/24"),
    ):
        prefix = sample("ServicePrefix")
        prefix["spec"]["public-pool"]["pool"] = pool
        (found,) = check(prefix)
        assert found.startswith("spec.public-pool: ") and rule in found, found


# ---- what would break every Envoy of a proxy: its admin port, its group's envoy-bootstrap ----


@pytest.mark.parametrize("kind", ["LoadBalancer", "GWProxy"])
def test_a_public_port_on_the_envoy_admin_port_is_refused(check: Check, sample: Sample, group: Obj, kind: str) -> None:
    proxy = sample(kind)
    proxy["spec"]["public-ports"] = [{"port": ADMIN_PORT, "protocol": "TCP"}, {"port": ADMIN_PORT, "protocol": "UDP"}]
    assert check(proxy, group) == [
        f"spec.public-ports[0].port: TCP port {ADMIN_PORT} is the Envoy admin port, which the Envoy binds at start: "
        f"a listener there cannot bind (reserved: {ADMIN_PORT}/TCP)"
    ]


CUSTOM_BOOTSTRAP = """
admin:
  address: {socket_address: {address: 0.0.0.0, port_value: 9000}}
static_resources:
  listeners:
  - name: health
    address: {socket_address: {address: 0.0.0.0, port_value: 8081}}
  - name: dns
    address: {socket_address: {address: 0.0.0.0, port_value: 53, protocol: UDP}}
  clusters:
  - name: tollgate-xds
    load_assignment:
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: "{xds_host}", port_value: {xds_port}}}}
node: {id: "{node_id}", cluster: "{cluster}"}
"""


@pytest.mark.parametrize("kind", ["LoadBalancer", "GWProxy"])
def test_a_public_port_the_groups_bootstrap_binds_is_refused(
    check: Check, sample: Sample, group: Obj, kind: str
) -> None:
    group["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    proxy = sample(kind)
    proxy["spec"]["public-ports"] = [
        {"port": 9000, "protocol": "TCP"},
        {"port": 8081, "protocol": "TCP"},
        {"port": 53, "protocol": "UDP"},
        {"port": 53, "protocol": "TCP"},
        {"port": ADMIN_PORT, "protocol": "TCP"},
    ]
    reserved = f"(reserved: 53/UDP, 8081/TCP, 9000/TCP, {ADMIN_PORT}/TCP)"
    assert check(proxy, group) == [
        "spec.public-ports[0].port: TCP port 9000 is the admin port of the group's envoy-bootstrap, which the Envoy "
        f"binds at start: a listener there cannot bind {reserved}",
        "spec.public-ports[1].port: TCP port 8081 is listener 'health' of the group's envoy-bootstrap, which the Envoy "
        f"binds at start: a listener there cannot bind {reserved}",
        "spec.public-ports[2].port: UDP port 53 is listener 'dns' of the group's envoy-bootstrap, which the Envoy "
        f"binds at start: a listener there cannot bind {reserved}",
        f"spec.public-ports[4].port: TCP port {ADMIN_PORT} is the Envoy admin port, which the Envoy binds at start: "
        f"a listener there cannot bind {reserved}",
    ]


def test_a_gateway_listener_on_a_port_the_groups_bootstrap_binds_is_refused(
    check: Check, sample: Sample, group: Obj
) -> None:
    group["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    proxy = sample("GWProxy")
    proxy["spec"]["gateway"]["listeners"] = [{"name": "web", "port": 8081, "protocol": "HTTP"}]
    assert [violation.partition(":")[0] for violation in check(proxy, group)] == ["spec.gateway.listeners[0].port"]


def test_ports_of_another_groups_bootstrap_are_free(check: Check, sample: Sample, group: Obj) -> None:
    other = named(sample("LBServiceGroup"), "other")
    other["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    proxy = sample("LoadBalancer")
    proxy["spec"]["public-ports"] = [{"port": 9000, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]
    assert check(proxy, group, other) == []


def test_a_group_bootstrap_binding_a_port_its_proxies_use_is_refused(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [{"port": 80, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]
    elsewhere = named(sample("LoadBalancer"), "other-group")
    elsewhere["spec"]["service-group"] = "other"
    elsewhere["spec"]["public-ports"] = [{"port": 9000, "protocol": "TCP"}]
    group["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    namespace, name = lb["metadata"]["namespace"], lb["metadata"]["name"]
    assert check(group, lb, elsewhere) == [
        "spec.envoy-bootstrap: listener 'health' of the group's envoy-bootstrap binds TCP port 8081, which "
        f"LoadBalancer {namespace}/{name} of this group listens on (spec.public-ports[1].port): its Envoy could not "
        "bind that listener"
    ]


@pytest.mark.parametrize("template", ["{node_id", "just text", "admin: 3", "- a list"])
def test_a_bootstrap_that_is_not_a_mapping_reserves_only_the_admin_port(
    check: Check, sample: Sample, group: Obj, template: str
) -> None:
    group["spec"]["envoy-bootstrap"] = template
    proxy = sample("LoadBalancer")
    proxy["spec"]["public-ports"] = [{"port": 9000, "protocol": "TCP"}]
    assert check(proxy, group) == []


# ---- names the allocator puts in label values ----


@pytest.mark.parametrize(("kind", "label"), [("LoadBalancer", LOAD_BALANCER_LABEL), ("GWProxy", GWPROXY_LABEL)])
def test_a_proxy_name_longer_than_a_label_value_is_refused(
    check: Check, sample: Sample, group: Obj, kind: str, label: str
) -> None:
    assert check(named(sample(kind), "a" * 63), group) == []
    assert check(named(sample(kind), "a" * 64), group) == [
        f"metadata.name: 64 characters, above the 63 of a label value: the {kind}'s Envoy Deployment and pods carry "
        f"its name in the label {label}"
    ]
