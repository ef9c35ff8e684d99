"""The contract between what creates Envoy pods, what configures them and what runs them.

An Envoy proxy pod carries ENVOY_PROXY_LABEL. Its Envoy reports, in the bootstrap's node metadata,
the pod it runs in; where several Envoys share one network namespace (the embedded cluster, where
pods are processes on one machine), LISTENER_ADDRESS_KEY tells the xDS server which address to bind
listeners to instead of 0.0.0.0.
"""

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

ENVOY_PROXY_LABEL = "tollgate.io/envoy-proxy"
ENVOY_CONTAINER = "envoy"
BOOTSTRAP_KEY = "envoy.yaml"
ADMIN_PORT = 9901
LISTENER_ADDRESS_KEY = "tollgate.io/listener-address"
POD_NAME_KEY = "tollgate.io/pod-name"
POD_NAMESPACE_KEY = "tollgate.io/pod-namespace"
POD_LABELS_KEY = "tollgate.io/pod-labels"
XDS_CLUSTER = "tollgate-xds"

# The xds debug API's access contract (tollgate.xds.api.auth; `epicctl proxy-status` is its client): a ServiceAccount
# token for DEBUG_AUDIENCE in the DEBUG_TOKEN_HEADER header, whose user may `get` the non-resource URL
# DEBUG_PERMISSION_URL. The chart's ServiceAccount DEBUG_SERVICE_ACCOUNT has that permission.
DEBUG_TOKEN_HEADER = "X-Tollgate-Debug-Token"
DEBUG_AUDIENCE = "tollgate-xds-debug"
DEBUG_PERMISSION_URL = "/tollgate/xds/debug"
DEBUG_SERVICE_ACCOUNT = "tollgate-xds-debug"


def ads_bootstrap(xds_host: str, xds_port: int, *, delta: bool = False) -> dict[str, object]:
    """An Envoy bootstrap that takes everything (clusters, endpoints, listeners) from the xDS server over ADS.

    The node identity is left to the command line (`--service-node`, `--service-cluster`), filled from the
    pod through the downward API, as a Deployment of Envoy proxies does it.
    """
    ads: dict[str, object] = {"ads": {}, "resource_api_version": "V3"}
    return {
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC" if delta else "GRPC",
                "transport_api_version": "V3",
                # A refused or dropped stream is retried within 0.5 to 5 s (Envoy's default backs off to 30 s): an
                # Envoy that connected before tollgate-xds saw its pod is served moments later.
                "grpc_services": [
                    {
                        "envoy_grpc": {
                            "cluster_name": XDS_CLUSTER,
                            "retry_policy": {"retry_back_off": {"base_interval": "0.5s", "max_interval": "5s"}},
                        }
                    }
                ],
                "set_node_on_first_message_only": True,
            },
            "cds_config": ads,
            "lds_config": ads,
        },
        "static_resources": {
            "clusters": [
                {
                    "name": XDS_CLUSTER,
                    "type": "STRICT_DNS",
                    "connect_timeout": "1s",
                    # A half-open connection to a vanished xDS server is found within about a minute (TCP) or
                    # 40 s (HTTP/2 PING), and Envoy reconnects instead of waiting on it for hours.
                    "upstream_connection_options": {
                        "tcp_keepalive": {"keepalive_probes": 3, "keepalive_time": 30, "keepalive_interval": 10}
                    },
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {
                                "http2_protocol_options": {
                                    "connection_keepalive": {"interval": "30s", "timeout": "10s"}
                                }
                            },
                        }
                    },
                    "load_assignment": {
                        "cluster_name": XDS_CLUSTER,
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {"socket_address": {"address": xds_host, "port_value": xds_port}}
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ]
        },
    }


def fill_bootstrap(template: str, values: Mapping[str, str]) -> str:
    """An LBServiceGroup's `envoy-bootstrap` template with its placeholders (`{node_id}`, `{cluster}`,
    `{xds_address}`, `{xds_host}`, `{xds_port}`) replaced by `values`."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


# Stand-ins for the placeholders, to read a template's own ports before any proxy fills it in.
_PLACEHOLDER_SAMPLES = {
    "node_id": "node",
    "cluster": "cluster",
    "xds_address": "xds:1",
    "xds_host": "xds",
    "xds_port": "1",
}


def bootstrap_ports(template: str) -> dict[tuple[str, int], str]:
    """The (protocol, port) pairs an `envoy-bootstrap` template binds before xDS adds anything, each with what
    binds it: the admin server and the static listeners. Empty for a template that is not a YAML mapping."""
    try:
        document = yaml.safe_load(fill_bootstrap(template, _PLACEHOLDER_SAMPLES))
    except yaml.YAMLError:
        return {}
    if not isinstance(document, dict):
        return {}
    ports: dict[tuple[str, int], str] = {}
    admin = document.get("admin")
    if isinstance(admin, dict):
        for protocol, port in _socket_ports(admin.get("address")):
            ports.setdefault((protocol, port), "the admin port of the group's envoy-bootstrap")
    static = document.get("static_resources")
    listeners = static.get("listeners") if isinstance(static, dict) else None
    for listener in listeners if isinstance(listeners, list) else []:
        if not isinstance(listener, dict):
            continue
        name = listener.get("name")
        what = (
            f"listener {name!r} of the group's envoy-bootstrap" if name else "a listener of the group's envoy-bootstrap"
        )
        for protocol, port in _socket_ports(listener.get("address")):
            ports.setdefault((protocol, port), what)
    return ports


def _socket_ports(address: Any) -> Iterator[tuple[str, int]]:
    """The (protocol, port) of an Envoy `Address` with a `socket_address` (TCP unless it says UDP)."""
    socket = address.get("socket_address") if isinstance(address, dict) else None
    if not isinstance(socket, dict):
        return
    port = socket.get("port_value")
    if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
        yield str(socket.get("protocol") or "TCP").upper(), port
