"""The contract between what creates Envoy pods, what configures them and what runs them.

An Envoy proxy pod carries ENVOY_PROXY_LABEL. Its Envoy reports, in the bootstrap's node metadata,
the pod it runs in; where several Envoys share one network namespace (the embedded cluster, where
pods are processes on one machine), LISTENER_ADDRESS_KEY tells the xDS server which address to bind
listeners to instead of 0.0.0.0.
"""

ENVOY_PROXY_LABEL = "tollgate.io/envoy-proxy"
ENVOY_CONTAINER = "envoy"
BOOTSTRAP_KEY = "envoy.yaml"
ADMIN_PORT = 9901
LISTENER_ADDRESS_KEY = "tollgate.io/listener-address"
POD_NAME_KEY = "tollgate.io/pod-name"
POD_NAMESPACE_KEY = "tollgate.io/pod-namespace"
POD_LABELS_KEY = "tollgate.io/pod-labels"
XDS_CLUSTER = "tollgate-xds"


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
