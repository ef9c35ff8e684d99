"""Each service's chart grants exactly what the service's rbac.yaml lists, and nothing it does not need."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.tools import repo_root

SERVICES = sorted(p.parent.name for p in (repo_root() / "services").glob("*/rbac.yaml"))
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
