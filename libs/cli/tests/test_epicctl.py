"""epicctl's rendering and argument handling, without a cluster (the end-to-end tests run it against one)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tollgate.cli import epicctl, render

NOW = datetime(2026, 1, 2, 0, 0, 0, tzinfo=UTC)
GUE = {"port": 6080, "protocol": "UDP"}
LB = {
    "metadata": {"name": "web", "namespace": "epic-acme", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"service-id": 2, "public-address": "192.168.77.2", "public-ports": [{"port": 80}], "service-group": "g"},
    "status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "ok"}],
        "gue-tunnel-endpoints": {
            "10.0.0.2": {
                "epic-address": "192.168.1.40",
                "epic-port": {"port": 6080, "protocol": "UDP"},
                "tunnel-id": 9,
            },
            "10.0.0.1": {
                "epic-address": "192.168.1.40",
                "epic-port": {"port": 6080, "protocol": "UDP"},
                "tunnel-id": 3,
            },
        },
    },
}


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [("2026-01-01T23:59:18Z", "42s"), ("2026-01-01T23:53:00Z", "7m"), ("2026-01-01T21:00:00Z", "3h"),
     ("2025-12-20T00:00:00Z", "13d"), (None, "<unknown>")],
)  # fmt: skip
def test_age_reads_like_kubectl(stamp: str | None, expected: str) -> None:
    assert render.age(stamp, NOW) == expected


def test_table_aligns_columns_under_upper_case_headers() -> None:
    rendered = render.table(
        [{"name": "a", "ready": "True"}, {"name": "long-name", "ready": "False"}], ["name", "ready"]
    )
    assert rendered.splitlines() == ["NAME        READY", "a           True", "long-name   False"]


def test_tunnels_are_listed_by_tunnel_id_with_their_account_and_node() -> None:
    rows = render.tunnel_rows([LB])
    assert [(r["account"], r["node"], r["tunnel-id"], r["epic-port"]) for r in rows] == [
        ("acme", "10.0.0.1", "3", "6080/UDP"),
        ("acme", "10.0.0.2", "9", "6080/UDP"),
    ]


def test_endpoints_are_listed_by_address_port_and_protocol_with_their_node() -> None:
    def rep(name: str, port: dict[str, object], node: str | None, tunnel: int | None) -> dict[str, object]:
        spec = {"load-balancer": "web", "address": "10.0.0.1", "port": port} | ({"node-address": node} if node else {})
        ready = {"type": "Ready", "status": "True"}
        return {"metadata": {"name": name, "namespace": "epic-acme"}, "spec": spec,
                "status": {"conditions": [ready]} | ({"tunnel-id": tunnel} if tunnel else {})}  # fmt: skip

    rows = render.endpoint_rows(
        [rep("a", {"port": 8080, "protocol": "TCP", "name": "http"}, "10.1.0.1", 3), rep("b", {"port": 53}, None, None)]
    )
    assert [(r["endpoint"], r["port-name"], r["node"], r["tunnel-id"], r["ready"]) for r in rows] == [
        ("10.0.0.1:8080/TCP", "http", "10.1.0.1", "3", "True"),
        ("10.0.0.1:53/TCP", "", "<ad hoc>", "", "True"),
    ]


def test_load_balancer_rows_and_description() -> None:
    row = render.lb_rows([LB])[0]
    assert (row["account"], row["service-id"], row["ports"], row["tunnels"], row["ready"]) == (
        "acme", "2", "80/TCP", "2", "True"
    )  # fmt: skip
    text = render.describe_lb(LB, [{"type": "Normal", "reason": "ServiceIDAllocated", "message": "allocated"}])
    assert "Service ID:      2" in text
    assert "  80/TCP -> 80" in text
    assert "ServiceIDAllocated" in text


def test_a_command_that_cannot_reach_a_cluster_fails_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = epicctl.main(["get", "accounts", "--kubeconfig", "/nonexistent/kubeconfig"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("epicctl: ")
    assert len(err.strip().splitlines()) == 1


def test_unknown_output_format_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        epicctl.main(["get", "accounts", "-o", "xml"])
    assert raised.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err
