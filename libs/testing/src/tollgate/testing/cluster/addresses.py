"""The embedded cluster's address ranges, and the endpoint policy the services run with on it: without the real
node, loopback ranges (pods and ClusterIPs nothing serves, simulated remote nodes in 127.77.0.0/16); beside it, the
node's ranges and 192.0.2.0/24's simulated remote nodes and public addresses."""

from __future__ import annotations

from tollgate.models.addresses import EndpointPolicy
from tollgate.testing import node

# ClusterIPs: loopback addresses too (see kwokctl_config).
SERVICE_CIDR = "127.2.0.0/16"
# Pod IPs: each node's pod CIDR is a /24 of this (node_manifest).
POD_CIDR = "127.1.0.0/16"
# Simulated remote client nodes and their endpoints: the one loopback range the dev endpoint policy allows.
REMOTE_CIDR = "127.77.0.0/16"
# The endpoint policy of the dev system and the end-to-end tests (TOLLGATE_<SERVICE>_ENDPOINT_*_RANGES of the webhook,
# the allocator and xds): the embedded cluster's own pod and Service ranges denied, 127.77.0.0/16 carved out of
# loopback.
DEV_ENDPOINT_DENIED_RANGES = f"{POD_CIDR},{SERVICE_CIDR}"
DEV_ENDPOINT_ALLOWED_RANGES = REMOTE_CIDR


def dev_endpoint_policy() -> EndpointPolicy:
    """The dev endpoint policy, for tests that build a service's parts in-process."""
    return EndpointPolicy.parse(DEV_ENDPOINT_DENIED_RANGES, DEV_ENDPOINT_ALLOWED_RANGES)


# The endpoint policy beside the real node: its pod and Service ranges and the node's address refused; endpoints
# are simulated remote nodes' addresses on the node's link (REMOTE_NODE_ADDRESSES), and loopback stays refused.
REAL_NODE_ENDPOINT_DENIED_RANGES = f"{node.POD_CIDR},{node.SERVICE_CIDR},{node.NODE_IP}/32"
# 192.0.2.64-192.0.2.191: simulated remote client nodes beside the real node (KWOK's nodes have .10-.12), on the
# machine; 192.0.2.192-192.0.2.254: load balancers' public addresses, which the node routes to their Envoy pods.
REMOTE_NODE_ADDRESSES = tuple(f"192.0.2.{host}" for host in range(64, 192))
PUBLIC_ADDRESSES = tuple(f"192.0.2.{host}" for host in range(192, 255))


def endpoint_policy_env(service: str, real_node: bool = False) -> dict[str, str]:
    """The endpoint policy of the dev system (or of a cluster with the real node) as the settings of `service`
    (tollgate.runtime.settings.EndpointPolicySettings)."""
    prefix = f"TOLLGATE_{service.upper()}_"
    if real_node:
        return {
            f"{prefix}ENDPOINT_DENIED_RANGES": REAL_NODE_ENDPOINT_DENIED_RANGES,
            f"{prefix}ENDPOINT_ALLOWED_RANGES": "",
        }
    return {
        f"{prefix}ENDPOINT_DENIED_RANGES": DEV_ENDPOINT_DENIED_RANGES,
        f"{prefix}ENDPOINT_ALLOWED_RANGES": DEV_ENDPOINT_ALLOWED_RANGES,
    }
