"""Envoys served the same sources share their clusters and load assignments; their listeners are their own."""

from __future__ import annotations

import copy
from typing import Any

from envoy.config.listener.v3 import listener_pb2

from tollgate.testing.envoy import envoy_pod_object
from tollgate.xds.identity import Identity
from tollgate.xds.resources import CLUSTER, ENDPOINT, LISTENER, listener, to_dict
from tollgate.xds.server import Connection, XdsServer


def virtual_service(name: str, port: int) -> dict[str, Any]:
    cluster = {
        "name": f"{name}-c",
        "service_discovery": "eds",
        "endpoints": [{"name": "e", "host": {"address": "192.0.2.10"}, "port": 1234}],
    }
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "generation": port,
            "creationTimestamp": f"2026-01-01T00:00:0{ord(name[0]) % 10}Z",
        },
        "spec": {"selector": {"app": "edge"}, "listeners": [{"name": "l", "udp": {"port": port, "cluster": cluster}}]},
    }


def envoys(server: XdsServer, *addresses: str) -> list[Connection]:
    """Envoys edge-0, edge-1... (app=edge) whose listeners bind to `addresses`, their pods known first."""
    for index, address in enumerate(addresses):
        server.world.set_pod(envoy_pod_object(f"edge-{index}", "ns", address, {"app": "edge"}))
    server.recompute()
    return [
        server.connect(Identity(f"edge-{index}.ns", "ns", f"edge-{index}", (("app", "edge"),), address), delta=True)
        for index, address in enumerate(addresses)
    ]


def bound(conn: Connection) -> set[tuple[str, int]]:
    """Where the Envoy's listeners are: (address, port) of each."""
    sockets = (to_dict(r)["address"]["socket_address"] for r in conn.stream.desired[LISTENER].values())
    return {(s["address"], s["port_value"]) for s in sockets}


def test_envoys_with_the_same_sources_share_cluster_and_endpoint_dicts_and_keep_their_own_listeners() -> None:
    server = XdsServer(debounce=0)
    server.world.set_virtual_service(virtual_service("a", 5000))
    server.world.set_virtual_service(virtual_service("b", 5001))
    first, second = envoys(server, "127.0.0.2", "127.0.0.3")

    for type_url in (CLUSTER, ENDPOINT):
        assert len(first.stream.desired[type_url]) == 2
        assert first.stream.desired[type_url] is second.stream.desired[type_url]
    assert first.stream.desired[LISTENER].keys() == second.stream.desired[LISTENER].keys()
    assert bound(first) == {("127.0.0.2", 5000), ("127.0.0.2", 5001)}
    assert bound(second) == {("127.0.0.3", 5000), ("127.0.0.3", 5001)}

    server.world.set_virtual_service(virtual_service("b", 5002))
    server.changed()
    server.recompute()
    assert first.stream.desired[CLUSTER] is second.stream.desired[CLUSTER]
    assert first.stream.desired[ENDPOINT] is second.stream.desired[ENDPOINT]
    assert bound(first) == {("127.0.0.2", 5000), ("127.0.0.2", 5002)}
    assert bound(second) == {("127.0.0.3", 5000), ("127.0.0.3", 5002)}


def test_a_resource_keeps_its_message_serialised_and_packs_it_when_sent() -> None:
    server = XdsServer(debounce=0)
    server.world.set_virtual_service(virtual_service("a", 5000))
    (conn,) = envoys(server, "127.0.0.2")
    (listener,) = conn.stream.desired[LISTENER].values()
    assert isinstance(listener.packed, bytes), "bytes, not a protobuf Any per resource"
    body = listener.body
    assert body is not None
    assert (body.type_url, body.value) == (LISTENER, listener.packed)


def test_envoys_share_a_listener_serialised_without_its_address_and_each_gets_its_own_address() -> None:
    server = XdsServer(debounce=0)
    server.world.set_virtual_service(virtual_service("a", 5000))
    first, second = envoys(server, "127.0.0.2", "127.0.0.3")
    (unit,) = server.sources[0].units
    (mine,) = first.stream.desired[LISTENER].values()
    (yours,) = second.stream.desired[LISTENER].values()
    assert mine.data is yours.data, "one serialised listener for every Envoy, not a copy each"
    assert mine.version != yours.version
    for resource, address in ((mine, "127.0.0.2"), (yours, "127.0.0.3")):
        assert resource.packed is not None
        assert listener_pb2.Listener.FromString(resource.packed) == listener(unit, address)


def test_what_envoys_were_sent_and_acked_is_the_shared_dict_and_an_unsubscribe_leaves_it_alone() -> None:
    server = XdsServer(debounce=0)
    server.world.set_virtual_service(virtual_service("a", 5000))
    server.world.set_virtual_service(virtual_service("b", 5001))
    conns = envoys(server, "127.0.0.2", "127.0.0.3")
    names = sorted(conns[0].stream.desired[ENDPOINT])
    for conn in conns:
        stream = conn.stream
        for type_url, subscribe in ((CLUSTER, []), (ENDPOINT, names)):
            stream.on_delta_request(type_url, "", subscribe, [], {}, None)
            push = stream.next_push()
            assert push is not None and push.type_url == type_url
            assert stream.on_delta_request(type_url, push.nonce, [], [], {}, None) is True
            assert stream.types[type_url].acked is stream.desired[type_url], "no copy per Envoy"
    first, second = (conn.stream for conn in conns)
    first.on_delta_request(ENDPOINT, "", [], [names[0]], {}, None)
    assert set(first.types[ENDPOINT].acked) == {names[1]}
    assert set(second.types[ENDPOINT].acked) == set(first.desired[ENDPOINT]) == set(names)


def test_a_change_to_one_listener_of_a_source_builds_that_listener_again_and_keeps_the_others() -> None:
    server = XdsServer(debounce=0)
    vs = virtual_service("a", 5000)
    second_listener = copy.deepcopy(vs["spec"]["listeners"][0])
    second_listener["name"], second_listener["udp"]["port"] = "m", 5001
    vs["spec"]["listeners"].append(second_listener)
    server.world.set_virtual_service(vs)
    (conn,) = envoys(server, "127.0.0.2")
    before = dict(conn.stream.desired[LISTENER])

    vs = copy.deepcopy(vs)
    vs["metadata"]["generation"] += 1
    vs["spec"]["listeners"][1]["udp"]["port"] = 5002
    server.world.set_virtual_service(vs)
    server.changed()
    server.recompute()
    after = conn.stream.desired[LISTENER]
    (kept,) = (name for name in before if after[name] is before[name])
    (changed,) = (name for name in before if after[name] is not before[name])
    assert kept.endswith("/l") and changed.endswith("/m")
    assert after[changed].version != before[changed].version
    assert bound(conn) == {("127.0.0.2", 5000), ("127.0.0.2", 5002)}
