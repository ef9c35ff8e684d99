"""epicctl against the embedded cluster, found as kubectl finds it: ~/.kube/config with no KUBECONFIG, --context
between a live and a dead cluster, KUBECONFIG lists merged as kubectl merges them, an exit code for each kind of
failure, the deprecated -n, and every -o format. No service runs: epicctl reads and writes the objects itself."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tollgate.cli.epicctl import DEPRECATED_N
from tollgate.cli.epicctl import main as epicctl_main
from tollgate.models.epic import GROUP, VERSION
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.net import free_port
from tollgate.testing.rbac import render_chart

LIVE, DEAD = "embedded", "dead"


def epicctl(*args: str) -> subprocess.CompletedProcess[str]:
    """epicctl in this process, with no --kubeconfig: its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = epicctl_main(list(args))
    return subprocess.CompletedProcess(["epicctl", *args], code, out.getvalue(), err.getvalue())


def two_contexts(cluster: EmbeddedCluster, current: str) -> dict[str, Any]:
    """The cluster's kubeconfig with its context renamed `embedded`, and a context `dead` (same user) whose server
    is a port nothing listens on."""
    config: dict[str, Any] = yaml.safe_load(cluster.kubeconfig.read_text())
    live = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    server = next(c for c in config["clusters"] if c["name"] == live["cluster"])["cluster"]
    dead_cluster = {"name": "dead-cluster", "cluster": {**server, "server": f"https://127.0.0.1:{free_port()}"}}
    config["clusters"].append(dead_cluster)
    config["contexts"] = [
        {"name": LIVE, "context": live},
        {"name": DEAD, "context": {"cluster": "dead-cluster", "user": live["user"]}},
    ]
    config["current-context"] = current
    return config


@pytest.fixture(scope="module")
def allocator_deployment() -> dict[str, Any]:
    """The allocator chart's Deployment (rendered before a test moves HOME, where helm is found)."""
    deployment: dict[str, Any] = next(o for o in render_chart("allocator") if o["kind"] == "Deployment")
    return deployment


@pytest.fixture
def home(cluster: EmbeddedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME with a ~/.kube/config of two contexts (current: the live one), and no KUBECONFIG."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(yaml.safe_dump(two_contexts(cluster, LIVE)))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return home


@pytest.fixture
def account(home: Path, core: client.CoreV1Api) -> Iterator[str]:
    """An account made with epicctl through ~/.kube/config, with one LoadBalancer `web`."""
    name = f"cli-{uuid.uuid4().hex[:6]}"
    made = epicctl("create", "user-namespace", name)
    assert (made.returncode, made.stdout) == (0, f"user namespace epic-{name} and account {name} created\n")
    lb = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LoadBalancer",
        "metadata": {"name": "web", "namespace": f"epic-{name}"},
        "spec": {"service-group": "web", "public-ports": [{"port": 80}], "envoy-replica-count": 2},
    }
    client.CustomObjectsApi(core.api_client).create_namespaced_custom_object(
        GROUP, VERSION, f"epic-{name}", "loadbalancers", lb
    )
    yield name
    core.delete_namespace(f"epic-{name}")


def test_get_accounts_reads_home_kube_config_when_kubeconfig_is_unset(account: str) -> None:
    listed = epicctl("get", "accounts")
    assert listed.returncode == 0, listed.stderr
    table = listed.stdout.splitlines()
    assert table[0].split() == ["NAME", "NAMESPACE", "READY", "AGE"]
    assert any(line.split()[:2] == [account, f"epic-{account}"] for line in table[1:])


def test_context_chooses_the_cluster_and_a_dead_one_is_unreachable(account: str, home: Path) -> None:
    for args in (["--context", DEAD, "get", "accounts"], ["get", "accounts", "--context", DEAD]):
        dead = epicctl(*args)
        assert (dead.returncode, dead.stdout) == (5, ""), dead.stderr
        assert dead.stderr.startswith("epicctl: the API server is unreachable: ")
        assert len(dead.stderr.splitlines()) == 1
    live = epicctl("--context", LIVE, "get", "accounts", "-o", "name")
    assert (live.returncode, live.stderr) == (0, "")
    assert f"account.epic.acnodal.io/{account}" in live.stdout.splitlines()

    unknown = epicctl("get", "accounts", "--context", "staging")
    assert unknown.returncode == 8
    assert unknown.stderr == (
        f"epicctl: --context staging: no such context in {home / '.kube' / 'config'} (contexts: {LIVE}, {DEAD})\n"
    )

    version = epicctl("version", "--context", DEAD)
    assert version.returncode == 5
    assert version.stdout.startswith("Client Version: "), "the client's version, before the server fails"


def test_kubeconfig_lists_merge_as_kubectl_merges_them(
    cluster: EmbeddedCluster, account: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file to set current-context sets it, though the context itself is defined in a later file (the
    kubernetes client's own merge takes the last file's: here the dead cluster)."""
    config = two_contexts(cluster, DEAD)
    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": LIVE}))
    second = tmp_path / "second"
    second.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{first}:{second}")
    listed = epicctl("get", "accounts", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert f"account.epic.acnodal.io/{account}" in listed.stdout.splitlines()
    monkeypatch.setenv("KUBECONFIG", f"{second}:{first}")
    assert epicctl("get", "accounts").returncode == 5


def test_not_found_and_conflict_have_their_exit_codes(account: str) -> None:
    missing = epicctl("describe", "lb", "nope", "-a", account)
    assert missing.returncode == 3
    assert missing.stderr == f"epicctl: load balancer 'nope' not found in account {account}\n"
    again = epicctl("create", "user-namespace", account)
    assert (again.returncode, again.stderr) == (4, f"epicctl: user namespace epic-{account} already exists\n")


def test_account_flag_and_the_deprecated_n(account: str) -> None:
    with_a = epicctl("get", "lb", "-a", account)
    assert (with_a.returncode, with_a.stderr) == (0, "")
    assert [line.split()[:2] for line in with_a.stdout.splitlines()[1:]] == [[account, "web"]]
    with_n = epicctl("get", "lb", "-n", account)
    assert with_n.returncode == 0
    assert with_n.stderr == DEPRECATED_N + "\n"
    # The same table, but for its AGE column, which may tick between the two runs.
    assert [line.rsplit(None, 1)[0] for line in with_n.stdout.splitlines()] == [
        line.rsplit(None, 1)[0] for line in with_a.stdout.splitlines()
    ]
    described = epicctl("describe", "loadbalancer", "web", "-n", account)
    assert described.returncode == 0
    assert f"Account:         {account}" in described.stdout
    none = epicctl("get", "lb", "-a", f"{account}-none")
    assert (none.returncode, none.stdout, none.stderr) == (0, "", "No resources found.\n")


def test_each_output_format(account: str) -> None:
    def out(*args: str) -> str:
        done = epicctl("get", "loadbalancers", "-a", account, *args)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        return done.stdout

    table, wide = out().splitlines(), out("-o", "wide").splitlines()
    assert table[0].split() == ["ACCOUNT", "NAME", "SERVICE-ID", "ADDRESS", "PORTS", "GROUP", "TUNNELS", "READY", "AGE"]
    assert wide[0].split() == [*table[0].split(), "REPLICAS", "CLUSTERS", "REASON"]
    assert wide[1].split()[:2] == [account, "web"]
    assert wide[1].split()[-1] == "2", "the load balancer's envoy-replica-count (no status yet: no service runs)"
    assert out("-o", "name") == "loadbalancer.epic.acnodal.io/web\n"
    as_json, as_yaml = json.loads(out("-o", "json")), yaml.safe_load(out("-o", "yaml"))
    assert as_json == as_yaml
    assert (as_json["apiVersion"], as_json["kind"]) == ("v1", "List")
    assert [(i["kind"], i["metadata"]["name"]) for i in as_json["items"]] == [("LoadBalancer", "web")]


def test_version_reports_the_api_server_and_each_service_deployment(
    allocator_deployment: dict[str, Any], home: Path, namespace: str, core: client.CoreV1Api
) -> None:
    """The allocator's chart's Deployment, in the test namespace, is what `version` reads."""
    deployment = {**allocator_deployment, "metadata": {**allocator_deployment["metadata"], "namespace": namespace}}
    client.AppsV1Api(core.api_client).create_namespaced_deployment(namespace, deployment)  # type: ignore[arg-type]
    done = epicctl("version", "-o", "json")
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout)
    assert reported["clientVersion"] == "0.1.0"
    assert reported["server"]["kubernetes"].startswith("v1.")
    ours = [c for c in reported["server"]["components"] if c.get("namespace") == namespace]
    assert ours == [
        {"component": "allocator", "version": "0.1.0", "image": "ghcr.io/tollgate/allocator:0.1.0",
         "namespace": namespace, "ready": ours[0]["ready"]}
    ]  # fmt: skip
    assert {c["component"] for c in reported["server"]["components"]} == {
        "allocator", "xds", "routedip", "jobs", "webhook"
    }  # fmt: skip
    text = epicctl("version").stdout.splitlines()
    assert text[:2] == ["Client Version: 0.1.0", f"Server Version: {reported['server']['kubernetes']}"]
    assert text[2].split() == ["COMPONENT", "VERSION", "IMAGE", "NAMESPACE", "READY"]


def test_completion_offers_the_kubeconfig_contexts_and_the_cluster_accounts(account: str, home: Path) -> None:
    """Through the console script, as the bash completion script calls it."""
    script = Path(sys.executable).with_name("epicctl")

    def candidates(*words: str) -> list[str]:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "_EPICCTL_COMPLETE": "bash_complete",
               "COMP_WORDS": " ".join(["epicctl", *words]), "COMP_CWORD": str(len(words))}  # fmt: skip
        done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60, check=True)
        return [line.removeprefix("plain,") for line in done.stdout.splitlines() if line]

    assert candidates("--context", "") == [LIVE, DEAD]
    assert account in candidates("get", "lb", "-a", account[:6])
    assert candidates("get", "lb", "-a", account) == [account]
    assert candidates("--context", DEAD, "get", "lb", "-a", "") == [], "no cluster, no candidates, no error"
