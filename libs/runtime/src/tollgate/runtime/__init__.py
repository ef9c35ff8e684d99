"""tollgate.runtime: the kit every service shares (settings, logging, telemetry, health, kube client)."""
