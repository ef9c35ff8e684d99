"""The gRPC side of tollgate-xds: the Aggregated Discovery Service."""
