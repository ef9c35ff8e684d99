"""The endpoint-registration API (tollgate.allocator.v1) over gRPC."""
