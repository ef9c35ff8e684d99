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
