"""Each service's chart grants exactly what the service's rbac.yaml lists, and nothing it does not need."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.requirements import nonempty
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for

SERVICES = nonempty(
    sorted(p.parent.name for p in (repo_root() / "services").glob("*/rbac.yaml")), "services/*/rbac.yaml"
)
FORBIDDEN = [
    ("delete", "nodes", ""),
    ("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
    ("escalate", "clusterroles", "rbac.authorization.k8s.io"),
    ("impersonate", "serviceaccounts", ""),
    ("get", "secrets", ""),
    ("delete", "customresourcedefinitions", "apiextensions.k8s.io"),
]


def can_i(cluster: EmbeddedCluster, kubeconfig: Path, verb: str, resource: str, group: str) -> bool:
    resource, _, subresource = resource.partition("/")
    target = f"{resource}.{group}" if group else resource
    extra = ["--subresource", subresource] if subresource else []
    result = cluster.kubectl(
        "--kubeconfig", str(kubeconfig), "auth", "can-i", verb, target, *extra, "--all-namespaces", check=False
    )
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize("service", SERVICES)
def test_service_account_has_exactly_its_rules(cluster: EmbeddedCluster, service: str, tmp_path: Path) -> None:
    kubeconfig = service_account_kubeconfig(cluster, service, tmp_path)
    rules = yaml.safe_load((repo_root() / "services" / service / "rbac.yaml").read_text())
    granted: set[tuple[str, str, str]] = set()
    for rule in rules.get("clusterRules") or []:
        if rule.get("resourceNames"):
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((verb, resource, group))
                    assert can_i(cluster, kubeconfig, verb, resource, group), f"{service} lacks {verb} {resource}"
    for verb, resource, group in FORBIDDEN:
        if (verb, resource, group) not in granted:
            assert not can_i(cluster, kubeconfig, verb, resource, group), f"{service} may {verb} {resource}"


# ---- the allocator: what it must not do, through the real API server as its ServiceAccount ----
# Each of these was allowed before its RBAC was narrowed to the calls it makes and its chart's admission policy
# (deploy/charts/tollgate-allocator/templates/policy.yaml) refused what RBAC cannot narrow. Every request is a
# server-side dry run: authorization and admission judge it, nothing is stored.

MARKER = "tollgate.io/created-for-account"


@dataclass(frozen=True)
class Namespaces:
    unmarked_user: str  # epic-<x>, made by a user: tollgate did not create it
    marked_user: str  # epic-<x> with the created-for-account annotation
    other: str  # no account's


@dataclass(frozen=True)
class Refusal:
    what: str
    command: Callable[[Namespaces], list[str]]
    says: str  # a piece of the API server's answer: the rule that refused it
    stdin: Callable[[Namespaces], str] | None = None


def _manifest(kind: str, namespace: str, **extra: Any) -> str:
    groups = {"Deployment": "apps/v1", "ConfigMap": "v1", "Account": "epic.acnodal.io/v1", "EPIC": "epic.acnodal.io/v1"}
    body: dict[str, Any] = {
        "apiVersion": groups[kind],
        "kind": kind,
        "metadata": {"name": "probe", "namespace": namespace},
        **extra,
    }
    return json.dumps(body)


DEPLOYMENT = {
    "spec": {
        "selector": {"matchLabels": {"app": "probe"}},
        "template": {
            "metadata": {"labels": {"app": "probe"}},
            "spec": {"containers": [{"name": "probe", "image": "envoyproxy/envoy"}]},
        },
    }
}
APPLY = ["apply", "--server-side", "--field-manager=tollgate-allocator", "--dry-run=server", "-f", "-"]

ALLOCATOR_REFUSALS = [
    Refusal(
        "delete a user namespace tollgate did not create",
        lambda ns: ["delete", "namespace", ns.unmarked_user, "--dry-run=server"],
        f"only namespaces tollgate created for an account (annotation {MARKER})",
    ),
    Refusal(
        "delete a namespace of no account",
        lambda ns: ["delete", "namespace", ns.other, "--dry-run=server"],
        "only namespaces tollgate created",
    ),
    Refusal(
        "mark a namespace it did not create as created for an account",
        lambda ns: ["annotate", "namespace", ns.unmarked_user, f"{MARKER}=x", "--dry-run=server"],
        f"metadata.annotations[{MARKER}]: the allocator may not add, change or remove it",
    ),
    Refusal(
        "change the mark of a namespace tollgate created",
        lambda ns: ["annotate", "--overwrite", "namespace", ns.marked_user, f"{MARKER}=other", "--dry-run=server"],
        f"metadata.annotations[{MARKER}]: the allocator may not add, change or remove it",
    ),
    Refusal(
        "label a namespace of no account",
        lambda ns: ["label", "namespace", ns.other, "epic.acnodal.io/account=x", "--dry-run=server"],
        "writes only the namespace epic and user namespaces",
    ),
    Refusal(
        "apply a Deployment outside the user namespaces",
        lambda ns: APPLY,
        "writes deployments only in user namespaces",
        stdin=lambda ns: _manifest("Deployment", ns.other, **DEPLOYMENT),
    ),
    Refusal(
        "apply a ConfigMap in kube-system",
        lambda ns: APPLY,
        "writes configmaps only in user namespaces",
        stdin=lambda ns: _manifest("ConfigMap", "kube-system", data={"envoy.yaml": "{}"}),
    ),
    Refusal(
        "read ConfigMaps",
        lambda ns: ["get", "configmap", "kube-root-ca.crt", "-n", "kube-system"],
        'cannot get resource "configmaps"',
    ),
    Refusal(
        "create an Account",
        lambda ns: ["create", "--dry-run=server", "-f", "-"],
        'cannot create resource "accounts"',
        stdin=lambda ns: _manifest("Account", ns.marked_user, spec={}),
    ),
    Refusal(
        "delete an Account",
        lambda ns: ["delete", "account", "probe", "-n", ns.marked_user, "--dry-run=server"],
        'cannot delete resource "accounts"',
    ),
    Refusal(
        "delete the EPIC singleton",
        lambda ns: ["delete", "epics.epic.acnodal.io", "epic", "-n", "epic", "--dry-run=server"],
        'cannot delete resource "epics"',
    ),
    Refusal(
        "create an EPIC outside the epic namespace",
        lambda ns: ["create", "--dry-run=server", "-f", "-"],
        'cannot create resource "epics"',
        stdin=lambda ns: _manifest("EPIC", ns.other, spec={}),
    ),
    Refusal(
        "list namespaces",
        lambda ns: ["get", "namespaces"],
        'cannot list resource "namespaces"',
    ),
    Refusal(
        "read a status subresource (it reads the objects)",
        lambda ns: ["get", "epics.epic.acnodal.io", "epic", "-n", "epic", "--subresource=status"],
        'cannot get resource "epics/status"',
    ),
]


@pytest.fixture(scope="module")
def allocator_namespaces(cluster: EmbeddedCluster) -> Iterator[Namespaces]:
    suffix = uuid.uuid4().hex[:5]
    names = Namespaces(f"epic-kept-{suffix}", f"epic-made-{suffix}", f"t-rbac-{suffix}")
    for name, marks in ((names.unmarked_user, {}), (names.marked_user, {MARKER: "x"}), (names.other, {})):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": marks}}
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))
    yield names
    for name in (names.unmarked_user, names.marked_user, names.other):
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def allocator_kubeconfig(
    cluster: EmbeddedCluster, allocator_namespaces: Namespaces, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The allocator's ServiceAccount, once its chart's admission policy is in force (the API server loads a new
    policy within a few seconds)."""
    kubeconfig = service_account_kubeconfig(cluster, "allocator", tmp_path_factory.mktemp("allocator-rbac"))
    probe = ["--kubeconfig", str(kubeconfig), "delete", "namespace", allocator_namespaces.other, "--dry-run=server"]
    wait_for(
        lambda: "ValidatingAdmissionPolicy" in cluster.kubectl(*probe, check=False).stderr,
        "the allocator chart's admission policy to refuse deleting an unmarked namespace",
    )
    return kubeconfig


@pytest.mark.parametrize("refusal", ALLOCATOR_REFUSALS, ids=lambda refusal: refusal.what)
def test_allocator_is_refused(
    cluster: EmbeddedCluster, allocator_kubeconfig: Path, allocator_namespaces: Namespaces, refusal: Refusal
) -> None:
    stdin = refusal.stdin(allocator_namespaces) if refusal.stdin else None
    command = refusal.command(allocator_namespaces)
    result = cluster.kubectl("--kubeconfig", str(allocator_kubeconfig), *command, stdin=stdin, check=False)
    assert result.returncode != 0, f"the allocator may {refusal.what}: {result.stdout}"
    assert "forbidden" in result.stderr.lower(), result.stderr
    assert refusal.says in result.stderr, result.stderr


ALLOCATOR_ALLOWED = [
    (
        "delete a user namespace tollgate created",
        lambda ns: ["delete", "namespace", ns.marked_user, "--dry-run=server"],
        None,
    ),
    (
        "label a user namespace for its account",
        lambda ns: ["label", "namespace", ns.unmarked_user, "epic.acnodal.io/account=x", "--dry-run=server"],
        None,
    ),
    (
        "apply an Envoy Deployment in a user namespace",
        lambda ns: APPLY,
        lambda ns: _manifest("Deployment", ns.unmarked_user, **DEPLOYMENT),
    ),
    (
        "apply a bootstrap ConfigMap in a user namespace",
        lambda ns: APPLY,
        lambda ns: _manifest("ConfigMap", ns.marked_user, data={"envoy.yaml": "{}"}),
    ),
]


@pytest.mark.parametrize(("what", "command", "stdin"), ALLOCATOR_ALLOWED, ids=[a[0] for a in ALLOCATOR_ALLOWED])
def test_allocator_may_still(
    cluster: EmbeddedCluster,
    allocator_kubeconfig: Path,
    allocator_namespaces: Namespaces,
    what: str,
    command: Callable[[Namespaces], list[str]],
    stdin: Callable[[Namespaces], str] | None,
) -> None:
    """What the allocator does stays allowed (as a dry run: nothing changes)."""
    args = command(allocator_namespaces)
    body = stdin(allocator_namespaces) if stdin else None
    result = cluster.kubectl("--kubeconfig", str(allocator_kubeconfig), *args, stdin=body, check=False)
    assert result.returncode == 0, f"the allocator may no longer {what}: {result.stderr}"
