"""The allocator's metrics (names: tollgate.runtime.metrics; reference: docs/operations.md)."""

from __future__ import annotations

from tollgate.runtime.metrics import Declarations

METRICS = Declarations("allocator")
TUNNEL_IDS_ALLOCATED = METRICS.counter("tunnel_ids_allocated", "Tunnel IDs handed out.", labels=("scheme",))
CONFLICTS = METRICS.counter("conflicts", "Writes refused with 409 Conflict (someone wrote first).", labels=("object",))
RETRIES = METRICS.counter("retries", "Writes tried again after a conflict.", labels=("object",))
TUNNEL_ID_BLOCKS_RESERVED = METRICS.counter("tunnel_id_blocks_reserved", "Blocks of tunnel IDs reserved.")
TUNNEL_ID_BLOCKS_RECLAIMED = METRICS.counter(
    "tunnel_id_blocks_reclaimed", "Blocks of gone owners whose record was removed."
)
SERVICE_IDS_ALLOCATED = METRICS.counter("service_ids_allocated", "Service IDs handed out to load balancers.")
