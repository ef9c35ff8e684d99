"""tollgate.allocator: the EPIC data model, system-wide tunnel IDs and endpoint registration over gRPC."""
