"""Generated from proto/tollgate/allocator/v1/allocator.proto by gen-proto.sh; do not edit."""
