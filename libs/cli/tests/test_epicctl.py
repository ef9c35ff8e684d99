"""epicctl's rendering and argument handling, without a cluster (the end-to-end tests run it against one)."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import pytest

from tollgate.cli import apiusers, epicctl, render
from tollgate.cli.exits import MEANINGS
from tollgate.models.epic import LoadBalancer
from tollgate.testing.tools import repo_root

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


def test_a_missing_kubeconfig_fails_with_one_line_and_the_config_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = epicctl.main(["get", "accounts", "--kubeconfig", "/nonexistent/kubeconfig"])
    assert code == 8
    assert capsys.readouterr().err == "epicctl: --kubeconfig /nonexistent/kubeconfig: no such file\n"


@pytest.mark.parametrize(
    "argv",
    [["get", "accounts", "-o", "xml"], ["get", "tunnels", "-o", "name"], ["get", "nothing"], ["describe", "lb"],
     ["get", "lb", "-a", "one", "-n", "two"], ["completion", "powershell"]],
)  # fmt: skip
def test_a_bad_command_line_exits_2_naming_what_is_wrong(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert epicctl.main(argv) == 2
    assert "Error: " in capsys.readouterr().err


def test_wide_adds_columns_and_name_prints_kind_group_and_name() -> None:
    narrow, wide = render.columns(render.LB_COLUMNS, False), render.columns(render.LB_COLUMNS, True)
    assert wide[: len(narrow)] == narrow
    assert wide[len(narrow) :] == ["replicas", "clusters", "reason"]
    assert render.lb_rows([LB])[0]["reason"] == "Ready"
    assert render.names([LB], LoadBalancer.resource) == "loadbalancer.epic.acnodal.io/web"


def test_each_service_without_a_deployment_is_not_installed_and_one_with_it_shows_label_image_and_readiness() -> None:
    deployment = {
        "metadata": {"name": "tollgate-xds", "namespace": "tollgate-system",
                     "labels": {"app.kubernetes.io/name": "tollgate-xds", "app.kubernetes.io/version": "0.1.0"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "tollgate-xds", "image": "ghcr.io/tollgate/xds:0.1.1"}]}}},
        "status": {"readyReplicas": 1},
    }  # fmt: skip
    rows = {r["component"]: r for r in render.component_rows([deployment])}
    assert rows["xds"] == {"component": "xds", "version": "0.1.0", "image": "ghcr.io/tollgate/xds:0.1.1",
                           "namespace": "tollgate-system", "ready": "1/2"}  # fmt: skip
    assert [rows[c]["version"] for c in ("allocator", "routedip", "jobs", "webhook")] == ["not installed"] * 4


def test_the_docs_list_every_exit_code_with_its_meaning() -> None:
    text = (repo_root() / "docs" / "allocator.md").read_text()
    section = text[text.index("### Exit codes") :]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, re.MULTILINE)
    assert [(int(code), meaning) for code, meaning in rows] == [(int(c), m) for c, m in MEANINGS.items()]


def test_bash_completes_commands_and_subcommands_through_the_console_script(tmp_path: Path) -> None:
    script = epicctl_script()
    source = subprocess.run([str(script), "completion", "bash"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "completion.bash").write_text(source)
    probe = (
        f"source {tmp_path / 'completion.bash'}\n"
        'complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _epicctl_completion epicctl;'
        ' echo "${COMPREPLY[*]}"; }\n'
        "complete_words epicctl ge\ncomplete_words epicctl get l\ncomplete_words epicctl get lb -o ''\n"
        "complete_words epicctl c\n"
    )
    env = {"PATH": f"{script.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    lines = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    assert lines.splitlines() == ["get", "loadbalancers", "table wide json yaml name", "completion create credentials"]
    assert (
        source
        == subprocess.run(
            [str(script)], capture_output=True, text=True, env={**env, "_EPICCTL_COMPLETE": "bash_source"}
        ).stdout
    )


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_the_completion_variable(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert epicctl.main(["completion", shell]) == 0
    assert f"_EPICCTL_COMPLETE={shell}_complete" in capsys.readouterr().out.replace('"', "")


def test_version_client_asks_nothing_of_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert epicctl.main(["version", "--client", "--kubeconfig", "/nonexistent"]) == 0
    assert capsys.readouterr().out == f"Client Version: {metadata.version('tollgate-cli')}\n"


def epicctl_script() -> Path:
    return Path(sys.executable).with_name("epicctl")


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["create", "user", "a:b", "-a", "acme"], "Invalid value for 'USERNAME': username: 'a:b' contains ':'"),
     (["create", "api-user", "a b", "acme"], "Invalid value for 'USERNAME': username: 'a b' contains whitespace"),
     (["delete", "user", "", "-a", "acme"], "Invalid value for 'USERNAME': username: must not be empty"),
     (["create", "user", "alice"], "name the account: -a ACCOUNT (or USERNAME ACCOUNT"),
     (["create", "user", "alice", "acme", "-a", "other"], "ACCOUNT acme and -a other name different accounts")],
)  # fmt: skip
def test_a_bad_api_user_command_line_is_refused_before_the_cluster_is_asked(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kubeconfig is needed to refuse it (the nonexistent one would be exit 8)."""
    assert epicctl.main([*argv, "--kubeconfig", "/nonexistent/kubeconfig"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "password"),
    [("s3cret pass\n", "s3cret pass"), ("s3cret\r\n", "s3cret"), ("s3cret\ns3cret\n", "s3cret"),
     ("s3cret\n\n", "s3cret"), ("", "")],
)  # fmt: skip
def test_a_password_file_or_piped_stdin_holds_the_password_on_its_first_line(text: str, password: str) -> None:
    assert apiusers.password_from_text(text) == password


def test_a_second_line_that_is_not_the_password_again_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^password: the input's lines differ"):
        apiusers.password_from_text("s3cret\ns3creT\n")
