"""The debug HTTP API of tollgate-xds."""
