"""What kwokctl is told: the control plane's configuration (loopback ports, no leader election, the real node's
API server settings), and KWOK's fake nodes as Node manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tollgate.testing import node
from tollgate.testing.cluster.addresses import SERVICE_CIDR
from tollgate.testing.net import free_ports

ZONES = ("nyc3-a", "nyc3-b", "nyc3-c")
KWOK_MANAGED = "kwok.x-k8s.io/node"

PORT_OPTIONS = (
    "kubeApiserverPort",
    "etcdPort",
    "etcdPeerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)


def node_manifest(index: int, real_node: bool = False, tainted: bool = True) -> dict[str, Any]:
    """KWOK's worker `index` (0-based): InternalIP 127.0.10.<index+1>, pods in 127.1.<index+1>.0/24; beside the real
    node, InternalIP 192.0.2.<index+10> and pods in 198.18.<index+1>.0/24 (neither assigned on the machine: KWOK only
    reports them), `tainted` so that only pods meant for many nodes land there."""
    name = f"tollgate-worker-{index}"
    pod_cidr = f"198.18.{index + 1}.0/24" if real_node else f"127.1.{index + 1}.0/24"
    internal_ip = f"192.0.2.{index + 10}" if real_node else f"127.0.10.{index + 1}"
    taints = [{"key": KWOK_MANAGED, "value": "fake", "effect": "NoSchedule"}] if real_node and tainted else []
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
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "providerID": f"digitalocean://{400000 + index}",
            "taints": taints,
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ]
        },
    }


def kwokctl_config(disable_qps_limits: bool = False, real_node_pki: Path | None = None) -> str:
    """Every component listens on loopback only; benchmarks may lift the components' client QPS limits. Without
    the real node, pod IPs and ClusterIPs are loopback ranges (POD_CIDR, SERVICE_CIDR) that nothing serves: KWOK's
    pods are simulated, with KWOK's default stages.

    The controller-manager and the scheduler run without leader election. There is one instance of each, so
    there is nobody to elect: the Lease only ever names that instance, and what it costs is an exit, since a
    leader that cannot renew its Lease within the renew deadline (10 s) exits on purpose, so that a standby
    takes over. With no standby, an API server stalled for longer (a 45-s SIGSTOP did it) left a cluster where
    no Job got a pod again. Without the election they wait for the API server like every other client and
    carry on (tests/e2e/test_cluster_faults.py). Whatever else stops a component, the ControlPlaneWatchdog
    starts it again.

    With the real node (tollgate.testing.node) the API server also listens on the node's address on its bridge, so
    that pods reach it through the `kubernetes` Service; ClusterIPs come from 198.19.0.0/16, which kube-proxy
    serves; the API server reaches the kubelet (logs, exec, port-forward) at its InternalIP with the admin pair; and
    KWOK manages only the nodes annotated as its own, never the real one.
    """
    options: dict[str, object] = {"bindAddress": "127.0.0.1"}
    # kwokctl picks each port by scanning down from 32767 for one nobody listens on yet, so two clusters created
    # at the same moment (parallel test sessions) take the same ports and one API server fails to bind. Ports
    # the kernel hands out are spread over its whole ephemeral range instead, and distinct within the cluster.
    options |= dict(zip(PORT_OPTIONS, free_ports(len(PORT_OPTIONS)), strict=True))
    if disable_qps_limits:
        options["disableQPSLimits"] = True
    service_cidr = {
        "key": "service-cluster-ip-range",
        "value": SERVICE_CIDR if real_node_pki is None else node.SERVICE_CIDR,
    }
    no_election = {"key": "leader-elect", "value": "false"}
    apiserver_args = [service_cidr]
    kwok_args: list[dict[str, str]] = []
    if real_node_pki is not None:
        options["kubeApiserverCertSANs"] = [node.NODE_IP, "127.0.0.1", *node.API_SERVER_SERVICE_NAMES]
        apiserver_args += [
            # Pods reach it at the node's address, the other components at 127.0.0.1 (kwokctl's kubeconfigs name
            # that whatever bindAddress says); tollgate.testing.node lets only those two interfaces in.
            {"key": "bind-address", "value": "0.0.0.0"},
            {"key": "advertise-address", "value": node.NODE_IP},
            {"key": "kubelet-client-certificate", "value": str(real_node_pki / "admin.crt")},
            {"key": "kubelet-client-key", "value": str(real_node_pki / "admin.key")},
            {"key": "kubelet-preferred-address-types", "value": "InternalIP"},
        ]
        kwok_args = [
            {"key": "manage-all-nodes", "value": "false"},
            {"key": "manage-nodes-with-annotation-selector", "value": f"{KWOK_MANAGED}=fake"},
        ]
    configuration = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": options,
        "componentsPatches": [
            {"name": "kube-apiserver", "extraArgs": apiserver_args},
            {"name": "kube-controller-manager", "extraArgs": [no_election]},
            {"name": "kube-scheduler", "extraArgs": [no_election]},
            *([{"name": "kwok-controller", "extraArgs": kwok_args}] if kwok_args else []),
        ],
    }
    return yaml.safe_dump(configuration)
