"""The ADS stream state machine: ordering, ACK/NACK, parking, delta resync."""

from __future__ import annotations

from tollgate.xds import ir
from tollgate.xds.resources import CLUSTER, ENDPOINT, LISTENER, Resource, Resources
from tollgate.xds.streams import Nack, Push, Stream

OWNER = ir.SourceRef("2026-01-01T00:00:00Z", "ns", "vs")


def res(name: str, version: str) -> Resource:
    return Resource(name, version, None, OWNER)


def want(clusters: dict[str, str], listeners: dict[str, str], endpoints: dict[str, str] | None = None) -> Resources:
    return {
        CLUSTER: {n: res(n, v) for n, v in clusters.items()},
        ENDPOINT: {n: res(n, v) for n, v in (endpoints or {}).items()},
        LISTENER: {n: res(n, v) for n, v in listeners.items()},
    }


def names(push: Push | None) -> tuple[str, list[str], list[str]]:
    assert push is not None
    return push.type_url, sorted(r.name for r in push.resources), sorted(push.removed)


def ack(stream: Stream, push: Push | None) -> None:
    assert push is not None
    subscribed = stream.types[push.type_url].names  # an ACK repeats the names it asks for
    assert stream.on_sotw_request(push.type_url, push.nonce, sorted(subscribed), None) is True


def connect_sotw(stream: Stream) -> None:
    """An Envoy's start: CDS, then LDS once clusters are in."""
    stream.on_sotw_request(CLUSTER, "", [], None)
    ack(stream, stream.next_push())
    stream.on_sotw_request(LISTENER, "", [], None)
    ack(stream, stream.next_push())
    assert stream.in_sync()


def test_sotw_answers_the_first_requests_even_when_empty() -> None:
    stream = Stream(delta=False)
    stream.on_sotw_request(CLUSTER, "", [], None)
    assert names(stream.next_push()) == (CLUSTER, [], [])
    assert stream.next_push() is None, "one response in flight at a time"


def test_make_before_break_removes_clusters_only_after_the_listeners() -> None:
    stream = Stream(delta=False)
    stream.set_desired(want({"old": "1"}, {"l": "1"}))
    connect_sotw(stream)

    assert stream.set_desired(want({"new": "1"}, {"l": "2"}))
    first = stream.next_push()
    assert names(first) == (CLUSTER, ["new", "old"], []), "the old cluster stays while a listener uses it"
    ack(stream, first)
    second = stream.next_push()
    assert names(second) == (LISTENER, ["l"], [])
    ack(stream, second)
    assert names(stream.next_push()) == (CLUSTER, ["new"], [])


def test_a_nack_is_not_resent_and_the_next_change_retries() -> None:
    stream = Stream(delta=False)
    stream.set_desired(want({"c": "1"}, {"l": "1"}))
    connect_sotw(stream)

    stream.set_desired(want({"c": "1"}, {"l": "2"}))
    push = stream.next_push()
    assert push is not None
    nack = stream.on_sotw_request(LISTENER, push.nonce, [], "Error adding/updating listener(s) l: cannot bind")
    assert isinstance(nack, Nack)
    assert nack.owners == {OWNER}
    assert stream.next_push() is None, "the rejected version is not sent again"
    assert stream.owner_state(OWNER) == "Rejected"
    assert stream.settled() and stream.in_sync(), "in sync with what is served: the rejected source is held back"
    assert stream.target(LISTENER)["l"].version == "1", "the source keeps the version the Envoy accepted"

    stream.set_desired(want({"c": "1"}, {"l": "3"}))
    retry = stream.next_push()
    assert names(retry) == (LISTENER, ["l"], [])
    ack(stream, retry)
    assert stream.owner_state(OWNER) == "Programmed"
    assert stream.in_sync()


GOOD = ir.SourceRef("2026-01-02T00:00:00Z", "ns", "good")


def test_a_rejected_source_is_held_back_while_the_others_converge() -> None:
    stream = Stream(delta=False)
    stream.set_desired(want({"c": "1"}, {"l": "1"}))
    connect_sotw(stream)

    def with_good(listener: str, good: str | None) -> Resources:
        resources = want({"c": "1"}, {"l": listener})
        if good is not None:
            resources[LISTENER]["g"] = Resource("g", good, None, GOOD)
        return resources

    stream.set_desired(with_good("2", None))
    push = stream.next_push()
    assert push is not None
    error = "Error adding/updating listener(s) l: cannot bind '127.1.0.5:3002': Address already in use"
    stream.on_sotw_request(LISTENER, push.nonce, [], error)
    rejection = stream.rejection(OWNER)
    assert rejection is not None and rejection.message == error

    stream.set_desired(with_good("2", "1"))
    push = stream.next_push()
    assert push is not None
    assert {r.name: r.version for r in push.resources} == {"l": "1", "g": "1"}, "the held-back one as last ACKed"
    ack(stream, push)
    assert (stream.owner_state(GOOD), stream.owner_state(OWNER)) == ("Programmed", "Rejected")

    stream.set_desired(with_good("2", "2"))
    push = stream.next_push()
    assert push is not None
    assert {r.name: r.version for r in push.resources} == {"l": "1", "g": "2"}, "the rejected version is never resent"
    ack(stream, push)
    assert stream.in_sync() and stream.owner_state(GOOD) == "Programmed"

    stream.set_desired(with_good("3", "2"))
    retry = stream.next_push()
    assert retry is not None and {r.name: r.version for r in retry.resources} == {"l": "3", "g": "2"}
    ack(stream, retry)
    assert stream.owner_state(OWNER) == "Programmed" and not stream.rejected


def test_a_new_source_rejected_is_not_served_at_all() -> None:
    stream = Stream(delta=True)
    stream.set_desired(want({}, {}))
    for type_url in (CLUSTER, LISTENER):
        stream.on_delta_request(type_url, "", [], [], {}, None)
        while (push := stream.next_push()) is not None:
            stream.on_delta_request(push.type_url, push.nonce, [], [], {}, None)
    bad = want({}, {"l": "1"})
    stream.set_desired(bad)
    push = stream.next_push()
    assert push is not None and push.type_url == LISTENER
    stream.on_delta_request(LISTENER, push.nonce, [], [], {}, "Error adding/updating listener(s) l: invalid")
    assert stream.target(LISTENER) == {}
    assert stream.next_push() is None
    assert stream.owner_state(OWNER) == "Rejected"


def test_endpoints_follow_a_resent_cluster() -> None:
    stream = Stream(delta=False)
    stream.set_desired(want({"c": "1"}, {}, {"c": "1"}))
    stream.on_sotw_request(CLUSTER, "", [], None)
    ack(stream, stream.next_push())
    stream.on_sotw_request(ENDPOINT, "", ["c"], None)
    ack(stream, stream.next_push())

    stream.set_desired(want({"c": "2"}, {}, {"c": "1"}))
    ack(stream, stream.next_push())
    assert names(stream.next_push()) == (ENDPOINT, ["c"], []), "unchanged endpoints are resent for the new cluster"


def test_only_endpoints_change_when_pods_come_and_go() -> None:
    stream = Stream(delta=True)
    stream.set_desired(want({"c": "1"}, {"l": "1"}, {"c": "1"}))
    for type_url, subscribe in ((CLUSTER, []), (ENDPOINT, ["c"]), (LISTENER, [])):
        stream.on_delta_request(type_url, "", subscribe, [], {}, None)
        while (push := stream.next_push()) is not None:
            stream.on_delta_request(push.type_url, push.nonce, [], [], {}, None)

    stream.set_desired(want({"c": "1"}, {"l": "1"}, {"c": "2"}))
    push = stream.next_push()
    assert names(push) == (ENDPOINT, ["c"], [])
    assert push is not None
    stream.on_delta_request(ENDPOINT, push.nonce, [], [], {}, None)
    assert stream.next_push() is None
    assert stream.in_sync()


def test_in_sync_counts_the_load_assignments_the_envoy_subscribes_to_at_their_versions() -> None:
    stream = Stream(delta=True)
    stream.set_desired(want({"a": "1", "b": "1"}, {"l": "1"}, {"a": "1", "b": "1"}))
    stream.on_delta_request(CLUSTER, "", [], [], {}, None)
    stream.on_delta_request(ENDPOINT, "", ["a"], [], {"a": "1"}, None)
    stream.on_delta_request(LISTENER, "", [], [], {"l": "1"}, None)
    while (push := stream.next_push()) is not None:
        assert not stream.in_sync(), "a response in flight"
        stream.on_delta_request(push.type_url, push.nonce, [], [], {}, None)
    assert stream.in_sync(), "a is ACKed at its version; b is not asked for"

    stream.on_delta_request(ENDPOINT, "", ["b"], [], {}, None)
    assert not stream.in_sync(), "b is asked for and not yet sent"
    push = stream.next_push()
    assert names(push) == (ENDPOINT, ["b"], [])
    assert push is not None
    stream.on_delta_request(ENDPOINT, push.nonce, [], [], {}, None)
    assert stream.in_sync()

    stream.set_desired(want({"a": "1", "b": "1"}, {"l": "1"}, {"a": "1", "b": "2"}))
    assert not stream.in_sync(), "b changed and is not yet sent"


def test_delta_resync_sends_only_what_differs_from_what_the_envoy_has() -> None:
    stream = Stream(delta=True)
    stream.set_desired(want({"c": "1"}, {"keep": "1", "change": "2"}))
    stream.on_delta_request(CLUSTER, "", [], [], {"c": "1"}, None)
    assert names(stream.next_push()) == (CLUSTER, [], []), "the first request is answered, with nothing new"
    push = stream.next_push()
    assert push is None
    cds = stream.types[CLUSTER].pending
    assert cds is not None
    stream.on_delta_request(CLUSTER, cds.nonce, [], [], {}, None)
    stream.on_delta_request(LISTENER, "", [], [], {"keep": "1", "change": "1", "gone": "1"}, None)
    assert names(stream.next_push()) == (LISTENER, ["change"], ["gone"])


def test_in_sync_follows_each_ack_after_a_change_and_ignores_the_order_of_names() -> None:
    stream = Stream(delta=False)
    stream.set_desired(want({"c": "1"}, {"a": "1", "b": "1"}))
    connect_sotw(stream)

    assert not stream.set_desired(want({"c": "1"}, {"b": "1", "a": "1"})), "the same content in another order"
    assert stream.in_sync()
    assert stream.set_desired(want({"c": "2"}, {"b": "1", "a": "2"}))
    assert not stream.in_sync()
    ack(stream, stream.next_push())
    assert not stream.in_sync(), "the clusters are ACKed, the listeners not yet"
    assert stream.in_sync() is False, "asked again, the same answer"
    ack(stream, stream.next_push())
    assert stream.in_sync()


def test_each_type_records_when_it_was_sent_acked_and_nacked() -> None:
    now = [100.0]
    stream = Stream(delta=False, clock=lambda: now[0])
    stream.set_desired(want({"c": "1"}, {"l": "1"}))
    connect_sotw(stream)
    listeners = stream.types[LISTENER]
    assert (listeners.sent_at, listeners.acked_at) == (100.0, 100.0)

    now[0] = 130.0
    stream.set_desired(want({"c": "1"}, {"l": "2"}))
    push = stream.next_push()
    assert push is not None
    assert (listeners.sent_at, listeners.acked_at) == (130.0, 100.0), "sent, not yet ACKed"
    now[0] = 131.0
    nack = stream.on_sotw_request(LISTENER, push.nonce, [], "cannot bind")
    assert isinstance(nack, Nack) and nack.at == 131.0
    assert listeners.acked_at == 100.0, "a NACK is no ACK"

    now[0] = 140.0
    stream.set_desired(want({"c": "1"}, {"l": "3"}))
    ack(stream, stream.next_push())
    assert (listeners.sent_at, listeners.acked_at) == (140.0, 140.0)
