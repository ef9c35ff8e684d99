"""The kubelet's and kube-proxy's configurations, written into the node's directory, and the commands that start
them (kept for a restart)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tollgate.testing.net import free_port, free_ports
from tollgate.testing.node.layout import (
    CLUSTER_DNS,
    KUBELET_ROOT,
    NODE_IP,
    NODE_NAME,
    POD_CIDR,
    REAL_NODE_LABEL,
    REAL_NODE_TAINT,
    SOCKET,
)
from tollgate.testing.tools import tool


def kubelet_config(directory: Path, pki: Path, tainted: bool) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "authentication": {
            "x509": {"clientCAFile": str(pki / "ca.crt")},
            "webhook": {"enabled": True},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{SOCKET}",
        "imageServiceEndpoint": f"unix://{SOCKET}",
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": "cluster.local",
        "resolvConf": str(directory / "resolv.conf"),
        "podLogsDir": str(directory / "pod-logs"),
        # Images are imported, never pulled: collecting one would lose it.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "maxPods": 110,
        "syncFrequency": "10s",
        "registerWithTaints": [REAL_NODE_TAINT] if tainted else [],
    }


def kubelet_command(directory: Path, pki: Path, kubeconfig: Path, tainted: bool) -> list[str]:
    """The kubelet's command line, its configuration and resolv.conf written."""
    config = directory / "kubelet.yaml"
    config.write_text(yaml.safe_dump(kubelet_config(directory, pki, tainted)))
    # Pods resolve nothing outside the cluster: no upstream server is reachable from the bridge.
    (directory / "resolv.conf").write_text("options ndots:1\n")
    return [
        str(tool("kubelet")),
        "--config",
        str(config),
        "--kubeconfig",
        str(kubeconfig),
        "--root-dir",
        str(KUBELET_ROOT),
        "--cert-dir",
        str(directory / "kubelet-pki"),
        "--hostname-override",
        NODE_NAME,
        "--node-ip",
        NODE_IP,
        "--node-labels",
        f"{REAL_NODE_LABEL}=real,type=real",
        "--v",
        "1",
    ]


def kube_proxy_command(directory: Path, kubeconfig: Path) -> list[str]:
    """kube-proxy's command line (iptables mode), its configuration written."""
    healthz_port, metrics_port = free_ports(2)
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # A rule change is applied at once rather than at most once a second: a Ready pod is routed sooner.
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False, "minSyncPeriod": "0s"},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "nodePortAddresses": [f"{NODE_IP}/32"],
    }
    path = directory / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    return [str(tool("kube-proxy")), "--config", str(path), "--v", "1"]
