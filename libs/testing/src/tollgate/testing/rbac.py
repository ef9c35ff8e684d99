"""Run a service with exactly its chart's permissions: the RBAC objects and admission policies rendered from its
Helm chart, applied to the cluster, and a kubeconfig holding a token of the chart's ServiceAccount."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.tools import repo_root, tool

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
# What RBAC cannot narrow, a chart refuses with a ValidatingAdmissionPolicy bound to its ServiceAccount.
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
NAMESPACE = "tollgate-system"


def release_namespaces() -> dict[str, str]:
    """deploy/charts/namespaces.yaml: the namespace of each release (`make deploy` and the Tiltfile read it too)."""
    return dict(yaml.safe_load((repo_root() / "deploy" / "charts" / "namespaces.yaml").read_text()))


def release_namespace(service: str) -> str:
    """The namespace a service's chart is installed in."""
    return release_namespaces()[f"tollgate-{service}"]


def chart_dir(service: str) -> Path:
    return repo_root() / "deploy" / "charts" / f"tollgate-{service}"


def default_replicas(service: str) -> int:
    """The replicaCount of the service's chart's values.yaml."""
    return int(yaml.safe_load((chart_dir(service) / "values.yaml").read_text())["replicaCount"])


def render_chart(
    service: str, namespace: str | None = None, values: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """`helm template` of the service's chart (release `tollgate-<service>`), as a list of objects."""
    chart = chart_dir(service)
    if not (chart / "charts").exists():
        subprocess.run(
            [str(tool("helm")), "dependency", "update", "--skip-refresh", str(chart)], check=True, capture_output=True
        )
    namespace = namespace or release_namespace(service)
    command = [str(tool("helm")), "template", f"tollgate-{service}", str(chart), "--namespace", namespace, "-f", "-"]
    result = subprocess.run(command, input=yaml.safe_dump(values or {}), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm template {chart} failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def service_account_kubeconfig(cluster: EmbeddedCluster, service: str, directory: Path) -> Path:
    """Apply the chart's RBAC and admission policies; a kubeconfig that authenticates as its ServiceAccount."""
    objects = [o for o in render_chart(service) if o["kind"] in RBAC_KINDS | POLICY_KINDS]
    account = next(o for o in objects if o["kind"] == "ServiceAccount")
    name = str(account["metadata"]["name"])
    namespace = release_namespace(service)
    cluster.kubectl("create", "namespace", namespace, check=False)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration=24h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    user = f"system:serviceaccount:{namespace}:{name}"
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [server],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": server["name"], "user": user}}],
        "current-context": user,
    }
    path = directory / f"{service}-serviceaccount.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig))
    return path
