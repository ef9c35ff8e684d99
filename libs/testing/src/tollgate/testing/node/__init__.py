"""One real node beside the embedded control plane: containerd with runc, the CNI bridge plugin, a kubelet and
kube-proxy (both built from the wrapper module with the control plane), on reserved test ranges inside the machine.

    node          192.0.2.2 on the empty bridge tollgate-node (the kubelet's InternalIP; the API server listens there
                  too, for pods), reached from pods through their gateway
    pods          198.18.0.0/24 from host-local IPAM on the same bridge, gateway 198.18.0.1 (the cluster's pod
                  range is 198.18.0.0/16; KWOK's fake nodes get other /24s of it)
    Services      198.19.0.0/16 (kube-proxy, iptables mode)

A load balancer's (or GWProxy's) public address reaches its Envoy container as EPIC's Multus attachment makes it
do: the address is on the pod's own interfaces, and the host routes it to the pod (the CNI plugin
tollgate.testing.public_address, chained after the bridge).

Nothing is masqueraded and nothing is routed off the machine: forwarding is on while the node runs (a ClusterIP
is DNATed to a pod on the bridge), and the chain TOLLGATE-NODE drops whatever would be forwarded between the
bridge and any other interface.

The node changes the host (sysctls, iptables chains, cgroups, mounts, network namespaces, directories; see
`../shared/notes/real-node.md`). `HostState` records what they were before the first start in
/run/tollgate-node/, and `teardown` puts every one back, also after a run that was killed midway (the next start
finds the record and cleans up first). One real node per machine: a second cluster asking for one is refused
while the first one's processes run.

The parts, one module each:

    layout       names, links, address ranges, the placement on the node, paths on this machine
    host         whether this machine can run it; the network it adds; the host changes it records and undoes
    containerd   containerd's configuration (CRI, CNI chain, registry hosts), image import, its containers
    kubelet      the kubelet's and kube-proxy's configurations and commands
    dns          CoreDNS's manifests
    teardown     which cluster owns the node, and the teardown
    real_node    RealNode: one cluster's node, its processes started, restarted and stopped
"""

from tollgate.testing.node.containerd import normalized_ref
from tollgate.testing.node.host import NodeError, host_fingerprint, unsupported_reason
from tollgate.testing.node.layout import (
    API_SERVER_SERVICE_NAMES,
    NODE_IP,
    NODE_NAME,
    NODE_POD_CIDR,
    POD_CIDR,
    POD_GATEWAY,
    REAL_NODE_PLACEMENT,
    REAL_NODE_TAINT,
    SERVICE_CIDR,
    SOCKET,
)
from tollgate.testing.node.real_node import RealNode

__all__ = [
    "API_SERVER_SERVICE_NAMES",
    "NODE_IP",
    "NODE_NAME",
    "NODE_POD_CIDR",
    "POD_CIDR",
    "POD_GATEWAY",
    "REAL_NODE_PLACEMENT",
    "REAL_NODE_TAINT",
    "SERVICE_CIDR",
    "SOCKET",
    "NodeError",
    "RealNode",
    "host_fingerprint",
    "normalized_ref",
    "unsupported_reason",
]
