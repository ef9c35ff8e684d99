"""The embedded cluster: a real kube-apiserver, etcd, controller-manager and scheduler, with KWOK
simulating nodes and pods, all started by `kwokctl --runtime binary` from the cached binaries.

Nodes get realistic labels, DigitalOcean-style providerIDs and pod CIDRs inside 127.0.0.0/8, so every
pod IP is a loopback address this machine can bind (process-backed Envoy pods listen there).

The parts, one module each:

    embedded     EmbeddedCluster: the lifecycle, kubectl and logs, addresses put on this machine, components' pids
    kwok         what kwokctl is told, and KWOK's nodes
    addresses    the address ranges and the services' endpoint policy on the cluster
    watchdog     ControlPlaneWatchdog, run by `python -m tollgate.testing.cluster watch` (__main__)
"""

from tollgate.testing.cluster.addresses import dev_endpoint_policy, endpoint_policy_env
from tollgate.testing.cluster.embedded import ClusterError, EmbeddedCluster, dev_cluster, dev_dir
from tollgate.testing.cluster.kwok import KWOK_MANAGED, node_manifest

__all__ = [
    "KWOK_MANAGED",
    "ClusterError",
    "EmbeddedCluster",
    "dev_cluster",
    "dev_dir",
    "dev_endpoint_policy",
    "endpoint_policy_env",
    "node_manifest",
]
