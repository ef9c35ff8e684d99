#!/usr/bin/env bash
# Regenerate the Python code of proto/tollgate/allocator/v1/allocator.proto into
# src/tollgate/allocator/grpc/_generated/ (committed; nothing generates code at run time).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
uv="$(command -v uv || echo "${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/uv/bin/uv")"
out="$here/src/tollgate/allocator/grpc/_generated"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$uv" run --no-project --with "grpcio-tools==1.85.*" python -m grpc_tools.protoc -I "$here/proto" \
  --python_out="$work" --pyi_out="$work" --grpc_python_out="$work" tollgate/allocator/v1/allocator.proto
mkdir -p "$out"
cp "$work"/tollgate/allocator/v1/allocator_pb2{.py,.pyi,_grpc.py} "$out/"
# protoc names modules after the proto's path; they live in the _generated package instead.
sed -i 's/^from tollgate\.allocator\.v1 import allocator_pb2/from tollgate.allocator.grpc._generated import allocator_pb2/' "$out/allocator_pb2_grpc.py"
echo '"""Generated from proto/tollgate/allocator/v1/allocator.proto by gen-proto.sh; do not edit."""' > "$out/__init__.py"
