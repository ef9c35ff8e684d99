"""epicctl against the embedded cluster, found as kubectl finds it: ~/.kube/config with no KUBECONFIG, --context
between a live and a dead cluster, KUBECONFIG lists merged as kubectl merges them, an exit code for each kind of
failure, the deprecated -n, every -o format, and the REST API users (create|delete user) written by concurrent
epicctls. No service runs: epicctl reads and writes the objects itself."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tollgate.cli import apiusers
from tollgate.cli.epicctl import DEPRECATED_N
from tollgate.cli.epicctl import main as epicctl_main
from tollgate.models.epic import API_USERS_KEY, API_USERS_SECRET, GROUP, VERSION
from tollgate.runtime import htpasswd
from tollgate.runtime.kube import api_client
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


def api_users(core: client.CoreV1Api, account: str) -> dict[str, str]:
    """The account's REST API users and their hashes, as the allocator reads them."""
    secret = core.read_namespaced_secret(API_USERS_SECRET, f"epic-{account}")
    return htpasswd.parse(base64.b64decode(secret.data[API_USERS_KEY]).decode())


def test_create_user_writes_verifiable_bcrypt_lines_keeping_the_other_users(
    account: str, core: client.CoreV1Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("alice-secret\n")
    made = epicctl("create", "user", "alice", "-a", account, "--password-file", str(password_file))
    assert (made.returncode, made.stdout, made.stderr) == (0, f"API user alice of account {account}: created\n", "")
    secret = core.read_namespaced_secret(API_USERS_SECRET, f"epic-{account}")
    assert secret.type == "Opaque"
    assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "epicctl"
    assert secret.metadata.annotations == apiusers.ANNOTATIONS, "as EPIC makes it, for Contour's authserver"
    first = api_users(core, account)
    assert first["alice"].startswith("$2b$12$") and htpasswd.verify(first["alice"], "alice-secret")

    # EPIC's own syntax, `create api-user USERNAME ACCOUNT`, with the password and its confirmation piped on stdin.
    monkeypatch.setattr(sys, "stdin", io.StringIO("bob-secret\nbob-secret\n"))
    bob = epicctl("create", "api-user", "bob", account)
    assert (bob.returncode, bob.stdout) == (0, f"API user bob of account {account}: created\n"), bob.stderr
    both = api_users(core, account)
    assert both["alice"] == first["alice"], "the first user's line is kept as it was"
    assert htpasswd.verify(both["bob"], "bob-secret")

    password_file.write_text("alice-new-secret\n")
    again = epicctl("create", "user", "alice", "-a", account, "--password-file", str(password_file))
    assert (again.returncode, again.stdout) == (0, f"API user alice of account {account}: password replaced\n")
    replaced = api_users(core, account)
    assert list(replaced) == ["alice", "bob"] and replaced["bob"] == both["bob"]
    assert htpasswd.verify(replaced["alice"], "alice-new-secret")
    assert not htpasswd.verify(replaced["alice"], "alice-secret")

    removed = epicctl("delete", "user", "alice", "-a", account)
    assert (removed.returncode, removed.stdout) == (0, f"API user alice of account {account}: deleted\n")
    gone = epicctl("delete", "user", "alice", account)
    assert (gone.returncode, gone.stdout) == (0, f"API user alice of account {account}: not there, nothing to delete\n")
    assert api_users(core, account) == {"bob": both["bob"]}


def test_create_user_refuses_bad_input_and_unknown_accounts_writing_nothing(
    account: str, core: client.CoreV1Api, tmp_path: Path
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("long-enough\n")
    bad_name = epicctl("create", "user", "a:b", "-a", account, "--password-file", str(password_file))
    assert bad_name.returncode == 2
    assert "Invalid value for 'USERNAME': username: 'a:b' contains ':'" in bad_name.stderr

    password_file.write_text("short\n")
    short = epicctl("create", "user", "alice", "-a", account, "--password-file", str(password_file))
    assert short.returncode == 2
    assert "Invalid value for password: password: at least 6 characters, got 5" in short.stderr

    password_file.write_text("long-enough\n")
    unknown = epicctl("create", "user", "alice", "-a", f"{account}-none", "--password-file", str(password_file))
    assert (unknown.returncode, unknown.stdout) == (3, "")
    assert unknown.stderr == (
        f"epicctl: account: no account '{account}-none' (no Account epic-{account}-none/{account}-none); "
        f"`epicctl create user-namespace {account}-none` makes one\n"
    )
    assert epicctl("delete", "user", "alice", "-a", f"{account}-none").returncode == 3
    for namespace in (f"epic-{account}", f"epic-{account}-none"):
        with pytest.raises(client.ApiException) as missing:
            core.read_namespaced_secret(API_USERS_SECRET, namespace)
        assert missing.value.status == 404

    edited = {"auth": "bob:$2b$04$bob\nnot a user line\n"}
    core.create_namespaced_secret(
        f"epic-{account}", client.V1Secret(metadata=client.V1ObjectMeta(name=API_USERS_SECRET), string_data=edited)
    )
    garbled = epicctl("create", "user", "alice", "-a", account, "--password-file", str(password_file))
    assert (garbled.returncode, garbled.stderr) == (
        1, f"epicctl: Secret epic-{account}/api-users, key auth: line 2: not `user:hash`; fix it with kubectl edit\n"
    )  # fmt: skip
    kept = core.read_namespaced_secret(API_USERS_SECRET, f"epic-{account}").data[API_USERS_KEY]
    assert base64.b64decode(kept).decode() == edited["auth"], "the line is not dropped: nothing was written"


class RacingCore(client.CoreV1Api):
    """A writer's client whose first read of the Secret returns only once every writer has read it (so they all
    race), and which counts the writes refused with 409."""

    def __init__(self, api: client.ApiClient, read_together: threading.Barrier, conflicts: list[int]) -> None:
        super().__init__(api)
        self.read_together, self.conflicts, self.reads = read_together, conflicts, 0

    def read_namespaced_secret(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_namespaced_secret(*args, **kwargs)
        finally:
            self.reads += 1
            if self.reads == 1:
                self.read_together.wait(30)

    def create_namespaced_secret(self, *args: Any, **kwargs: Any) -> Any:
        return self._counted(super().create_namespaced_secret, *args, **kwargs)

    def replace_namespaced_secret(self, *args: Any, **kwargs: Any) -> Any:
        return self._counted(super().replace_namespaced_secret, *args, **kwargs)

    def _counted(self, write: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return write(*args, **kwargs)
        except client.ApiException as error:
            if error.status == 409:
                self.conflicts.append(409)
            raise


def test_concurrent_create_users_lose_no_line(cluster: EmbeddedCluster, account: str, core: client.CoreV1Api) -> None:
    """Writers that all read the account's Secret absent: one creates it, the others are refused (409 AlreadyExists)
    and read it again, then race each other's replaces (409 Conflict); every user ends up in it."""
    users = [f"agent-{n}" for n in range(8)]
    hashes = {user: htpasswd.hash_password(f"{user}-secret", rounds=4) for user in users}
    read_together = threading.Barrier(len(users))
    conflicts: list[int] = []
    failures: list[BaseException] = []

    def create(user: str) -> None:
        own = RacingCore(api_client(cluster.kubeconfig), read_together, conflicts)
        try:
            apiusers.set_user(own, account, user, hashes[user])
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=create, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert len(conflicts) >= len(users) - 1, "all but one writer lost the race to create the Secret"
    assert api_users(core, account) == hashes
