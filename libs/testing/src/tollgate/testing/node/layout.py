"""Where the real node sits: its name, links and address ranges, the label and taint that place pods on it, and its
places on this machine."""

from __future__ import annotations

from pathlib import Path

NODE_NAME = "tollgate-node"
BRIDGE = "tollgate0"
NODE_LINK = "tollgate-node"
NODE_IP = "192.0.2.2"
NODES_CIDR = "192.0.2.0/24"
POD_CIDR = "198.18.0.0/16"
NODE_POD_CIDR = "198.18.0.0/24"
POD_GATEWAY = "198.18.0.1"
SERVICE_CIDR = "198.19.0.0/16"
CLUSTER_DNS = "198.19.0.10"
# How pods name the API server: the `kubernetes` Service's ClusterIP (the first of the range) and DNS names.
API_SERVER_SERVICE_NAMES = (
    "198.19.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
CNI_BIN_DIR = Path("/usr/lib/cni")
PUBLIC_ADDRESS_PLUGIN = "tollgate-public-address"
FORWARD_CHAIN = "TOLLGATE-NODE"
INPUT_CHAIN = "TOLLGATE-NODE-INPUT"
REAL_NODE_LABEL = "tollgate.io/node"
# The real node's own taint, when KWOK's nodes take the ordinary pods (EmbeddedCluster.fake_nodes_take_pods): only
# pods that tolerate it run there (REAL_NODE_PLACEMENT: the tests' Envoy pods, CoreDNS).
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "real", "effect": "NoSchedule"}
REAL_NODE_PLACEMENT = {
    "nodeSelector": {REAL_NODE_LABEL: "real"},
    "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
}

STATE_DIR = Path("/run/tollgate-node")
# Sockets and the kubelet's root under a short path of their own (a unix socket's path has at most 107 bytes; a
# test's temporary directory is longer): one real node per machine, so one fixed place.
SOCKET = STATE_DIR / "containerd.sock"
KUBELET_ROOT = STATE_DIR / "kubelet"
CONTAINERD_STATE = STATE_DIR / "containerd"
