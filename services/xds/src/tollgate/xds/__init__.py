"""tollgate.xds: Turns VirtualServices and load balancers into Envoy configuration served over gRPC ADS."""
