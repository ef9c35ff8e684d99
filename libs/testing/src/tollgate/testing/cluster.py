"""The embedded cluster: a real kube-apiserver, etcd, controller-manager and scheduler, with KWOK
simulating nodes and pods, all started by `kwokctl --runtime binary` from the cached binaries.

Nodes get realistic labels, DigitalOcean-style providerIDs and pod CIDRs inside 127.0.0.0/8, so every
pod IP is a loopback address this machine can bind (process-backed Envoy pods listen there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tollgate.testing.kubelet.stages import kwok_stages
from tollgate.testing.tools import repo_root, tool

ZONES = ("nyc3-a", "nyc3-b", "nyc3-c")
KWOK_MANAGED = "kwok.x-k8s.io/node"
# ClusterIPs: loopback addresses too, which the embedded kubelet listens on (see kwokctl_config).
SERVICE_CIDR = "127.2.0.0/16"


class ClusterError(RuntimeError):
    pass


def node_manifest(index: int) -> dict[str, Any]:
    """Worker `index` (0-based): InternalIP 127.0.10.<index+1>, pods in 127.1.<index+1>.0/24."""
    name = f"tollgate-worker-{index}"
    pod_cidr = f"127.1.{index + 1}.0/24"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_MANAGED: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "s-2vcpu-4gb",
                "topology.kubernetes.io/region": "nyc3",
                "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
                "type": "kwok",
            },
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr], "providerID": f"digitalocean://{400000 + index}"},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"127.0.10.{index + 1}"},
                {"type": "Hostname", "address": name},
            ]
        },
    }


def kwokctl_config(disable_qps_limits: bool = False) -> str:
    """Every component listens on loopback only; benchmarks may lift the components' client QPS limits.

    ClusterIPs come from SERVICE_CIDR, a loopback range like the pod IPs, so that the embedded kubelet can
    serve them (tollgate.testing.kubelet.proxy) and the API server reaches a webhook referenced by a Service
    at its ClusterIP, as on any cluster. (--enable-aggregator-routing, which makes the API server call the
    Service's endpoints instead, cannot help here: EndpointSlices refuse loopback addresses, so they never list
    a pod of this cluster.) KWOK's stages are its defaults, except that the pods the embedded kubelet runs are
    placed but not made Ready (tollgate.testing.kubelet.stages).
    """
    options: dict[str, object] = {"bindAddress": "127.0.0.1"}
    if disable_qps_limits:
        options["disableQPSLimits"] = True
    service_cidr = {"key": "service-cluster-ip-range", "value": SERVICE_CIDR}
    configuration = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": options,
        "componentsPatches": [{"name": "kube-apiserver", "extraArgs": [service_cidr]}],
    }
    return yaml.safe_dump_all([configuration, *kwok_stages()])


@dataclass
class EmbeddedCluster:
    name: str
    workdir: Path
    kubeconfig: Path
    disable_qps_limits: bool = False

    def _env(self) -> dict[str, str]:
        return {**os.environ, "KWOK_WORKDIR": str(self.workdir)}

    def _kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(tool("kwokctl")), *args, "--name", self.name],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kwokctl {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return result

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(tool("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def install_crds(self) -> None:
        """Apply the repository's CRDs (server-side, taking over fields another manager set) and wait until every
        one is Established."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / "crds"))
        self.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=tollgate")

    def exists(self) -> bool:
        return (self.workdir / "clusters" / self.name / "kwok.yaml").exists()

    def is_ready(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0

    def up(self, nodes: int = 3, timeout: float = 180) -> float:
        """Create (or restart) the cluster and its nodes; returns seconds from start to every node Ready."""
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        if self.exists():
            if not self.is_ready():
                self._kwokctl("start", "cluster", "--kubeconfig", str(self.kubeconfig), "--timeout", f"{int(timeout)}s")
        else:
            config = self.workdir / "kwokctl.yaml"
            config.write_text(kwokctl_config(self.disable_qps_limits))
            bins = {
                name: str(tool(name))
                for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
            }
            self._kwokctl(
                "create",
                "cluster",
                "--runtime",
                "binary",
                "--config",
                str(config),
                "--kubeconfig",
                str(self.kubeconfig),
                "--timeout",
                f"{int(timeout)}s",
                "--kube-apiserver-binary",
                bins["kube-apiserver"],
                "--kube-controller-manager-binary",
                bins["kube-controller-manager"],
                "--kube-scheduler-binary",
                bins["kube-scheduler"],
                "--etcd-binary",
                bins["etcd"],
                "--kwok-controller-binary",
                str(tool("kwok")),
            )
        self.wait_ready(timeout - (time.monotonic() - started))
        self.ensure_nodes(nodes, timeout - (time.monotonic() - started))
        return time.monotonic() - started

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"kube-apiserver not ready after {timeout:.0f} s; logs in {self.logs_dir()}")
            time.sleep(0.2)
        # The default ServiceAccount appears once the controller-manager runs; pods need it.
        while self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise ClusterError("the default ServiceAccount never appeared: is kube-controller-manager running?")
            time.sleep(0.2)

    def ensure_nodes(self, count: int, timeout: float) -> None:
        manifests = [node_manifest(index) for index in range(count)]
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))
        # Status given at creation is dropped by the API server: set the addresses KWOK then keeps.
        for manifest in manifests:
            self.kubectl(
                "patch",
                "node",
                manifest["metadata"]["name"],
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": manifest["status"]}),
            )
        self.kubectl("wait", "--for=condition=Ready", "node", "-l", "type=kwok", f"--timeout={max(int(timeout), 1)}s")

    def logs_dir(self) -> Path:
        return self.workdir / "clusters" / self.name / "logs"

    def down(self) -> None:
        if self.exists():
            self._kwokctl("delete", "cluster", "--kubeconfig", str(self.kubeconfig))
        self.kubeconfig.unlink(missing_ok=True)


def dev_dir(root: Path) -> Path:
    """The state directory of `make cluster`, `make dev` and Tilt: $TOLLGATE_DEV_DIR, else .dev in the checkout."""
    return Path(os.environ.get("TOLLGATE_DEV_DIR") or root / ".dev")


def dev_cluster(root: Path, state: Path | None = None, name: str = "tollgate") -> EmbeddedCluster:
    """The cluster of `make cluster` / `make dev`: state under the dev directory, kubeconfig beside it."""
    directory = state or dev_dir(root)
    return EmbeddedCluster(name, directory / "kwok", directory / "kubeconfig")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tollgate.testing.cluster", description="The embedded cluster.")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args(argv)
    cluster = dev_cluster(repo_root())
    if args.action == "up":
        seconds = cluster.up(args.nodes)
        print(f"cluster {cluster.name} ready in {seconds:.1f} s with {args.nodes} nodes")
        print(f"  export KUBECONFIG={cluster.kubeconfig}")
        print(cluster.kubectl("get", "nodes", "-o", "wide").stdout.rstrip())
    elif args.action == "down":
        cluster.down()
        print(f"cluster {cluster.name} deleted")
    else:
        ready = cluster.is_ready()
        print(f"cluster {cluster.name}: {'ready' if ready else 'not running'}")
        return 0 if ready else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
