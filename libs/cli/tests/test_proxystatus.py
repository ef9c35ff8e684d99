"""proxy-status's states and tables, from debug API answers as tollgate.xds.api.debug writes them."""

from __future__ import annotations

import re
from typing import Any

from tollgate.cli import proxystatus, render, xdsdebug
from tollgate.cli.exits import Exit

NOW = 1000.0


def entry(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "subscribed": True, "pending": False, "nack": None, "held_back": {},
        "sent_version": "3", "sent_nonce": "7", "acked_version": "3", "acked_nonce": "7",
        "sent_at": NOW - 50, "acked_at": NOW - 40,
    }  # fmt: skip
    return base | fields


def envoy(**types: dict[str, Any]) -> dict[str, Any]:
    return {
        "node": "edge.acme", "pod": "edge", "namespace": "acme", "replica": "tollgate-system/xds-0",
        "server_time": NOW, "api": "sotw", "connection": 1, "sources": ["VirtualService acme/edge"],
        "types": types,
    }  # fmt: skip


def test_each_type_is_synced_pending_stale_nacked_or_not_sent() -> None:
    def state(**fields: Any) -> tuple[str, str]:
        return proxystatus.type_state(entry(**fields), NOW, stale_after=30)

    assert state() == ("SYNCED", "")
    assert state(pending=True, sent_at=NOW - 10) == ("PENDING", ""), "unanswered for less than the threshold"
    assert state(pending=True, sent_at=NOW - 31) == ("STALE", ""), "sent, not ACKed for longer than the threshold"
    nack = {"version": "4", "nonce": "8", "message": "cannot bind: Address already in use", "at": NOW - 5}
    assert state(nack=nack) == ("NACKED", "cannot bind: Address already in use")
    # After the NACK, the Envoy ACKed the config without the rejected source: still NACKED while it is held back.
    held = {"VirtualService acme/bad": "cannot bind"}
    assert state(held_back=held) == ("NACKED", "VirtualService acme/bad: cannot bind")
    assert state(subscribed=False, acked_at=None, sent_at=None) == ("NOT SENT", "")


def test_the_table_names_each_envoy_what_it_serves_its_states_replica_and_last_ack() -> None:
    nack = {"version": "4", "nonce": "8", "message": "Address already in use", "at": NOW - 5}
    found = envoy(
        clusters=entry(),
        listeners=entry(nack=nack, acked_at=NOW - 130),
        endpoints=entry(subscribed=False, acked_at=None, sent_at=None, sent_version="", acked_version=""),
    )
    status = proxystatus.envoy_status(found, now=NOW + 3600, stale_after=30)  # the replica's clock decides
    assert status["secondsSinceAck"] == 40
    assert status["types"]["listeners"]["error"] == "Address already in use"
    rows = proxystatus.status_rows([status])
    text = render.table(rows, render.columns(proxystatus.STATUS_COLUMNS, wide=True))
    assert [re.split(r"\s{3,}", line) for line in text.splitlines()] == [
        ["NAME", "SERVES", "CDS", "LDS", "EDS", "XDS", "LAST-ACK", "API", "VERSIONS", "ERROR"],
        ["edge.acme", "VirtualService acme/edge", "SYNCED", "NACKED", "NOT SENT", "tollgate-system/xds-0", "40s",
         "sotw", "cds=3/3 eds=-/- lds=3/3", "lds: Address already in use"],
    ]  # fmt: skip


def test_an_envoy_never_acked_shows_never() -> None:
    status = proxystatus.envoy_status(envoy(clusters=entry(pending=True, acked_at=None)), NOW, 30)
    assert proxystatus.status_rows([status])[0]["last-ack"] == "never"


UDP_LISTENER = {
    "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
    "name": "acme/edge/dns",
    "address": {"socket_address": {"protocol": "UDP", "address": "127.1.0.5", "port_value": 5353}},
    "listener_filters": [
        {
            "name": "envoy.filters.udp_listener.udp_proxy",
            "typed_config": {
                "matcher": {"on_no_match": {"action": {"typed_config": {"cluster": "acme/edge/dns-c"}}}},
            },
        }
    ],
}
TCP_LISTENER = {
    "name": "acme/edge/web",
    "address": {"socket_address": {"address": "127.1.0.5", "port_value": 8080}},
    "filter_chains": [{"filters": [{"typed_config": {"stat_prefix": "web", "cluster": "acme/edge/web-c"}}]}],
}


def test_proxy_config_tables() -> None:
    assert proxystatus.listener_rows([UDP_LISTENER, TCP_LISTENER]) == [
        {"name": "acme/edge/dns", "address": "127.1.0.5", "port": "5353", "protocol": "UDP",
         "destination": "acme/edge/dns-c"},
        {"name": "acme/edge/web", "address": "127.1.0.5", "port": "8080", "protocol": "TCP",
         "destination": "acme/edge/web-c"},
    ]  # fmt: skip
    endpoint = {"endpoint": {"address": {"socket_address": {"address": "10.0.0.1", "port_value": 53}}}}
    assignment = {"cluster_name": "acme/edge/dns-c", "endpoints": [{"lb_endpoints": [endpoint]}]}
    cluster = {"name": "acme/edge/dns-c", "type": "STATIC", "load_assignment": assignment}
    assert proxystatus.cluster_rows([cluster, {"name": "e", "eds_cluster_config": {}}]) == [
        {"name": "acme/edge/dns-c", "type": "STATIC", "endpoints": "1", "lb-policy": "ROUND_ROBIN"},
        {"name": "e", "type": "EDS", "endpoints": "eds", "lb-policy": "ROUND_ROBIN"},
    ]
    assert proxystatus.endpoint_rows([assignment]) == [
        {"cluster": "acme/edge/dns-c", "endpoint": "10.0.0.1:53", "weight": "1", "health": "UNKNOWN"}
    ]


def test_a_refusal_says_who_refused_and_exits_with_its_code() -> None:
    debug_api = xdsdebug._refusal(403, '{"detail": "user \'alice\' may not get /tollgate/xds/debug"}', "xds ns/xds-0")
    assert (str(debug_api), debug_api.code) == (
        "xds ns/xds-0: the debug API refused (403): user 'alice' may not get /tollgate/xds/debug",
        Exit.DENIED,
    )
    status = '{"kind": "Status", "message": "address not allowed", "code": 400}'
    loopback = xdsdebug._refusal(400, status, "xds ns/xds-0")
    assert (str(loopback), loopback.code) == (
        "xds ns/xds-0: unreachable through the API server (400): address not allowed",
        Exit.UNREACHABLE,
    )
    forbidden = xdsdebug._refusal(403, '{"kind": "Status", "message": "pods \\"xds-0\\" is forbidden"}', "xds ns/xds-0")
    assert forbidden.code == Exit.DENIED and "the API server refused (403)" in str(forbidden)
    assert xdsdebug._refusal(503, "no endpoints", "xds ns/xds-0").code == Exit.UNREACHABLE
    refused = (
        '{"kind": "Status", "message": "error trying to reach service: dial tcp 198.18.0.6:8081: connect: '
        'connection refused", "code": 503}'
    )
    closed = xdsdebug._refusal(503, refused, "xds ns/xds-0")
    assert closed.code == Exit.UNREACHABLE
    assert str(closed).endswith("connection refused" + xdsdebug.REFUSED_HINT), str(closed)
    assert "debugApi.service=true" in str(closed)
