"""UDP proxy sessions: the same limits, bounds and defaults on a VirtualService's udp listener and on a
LoadBalancer. A session is one client source (address and port) that Envoy's UDP proxy tracks; each one holds
an upstream socket (a file descriptor) in Envoy until it has been idle for the idle timeout.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

# Sized for a gateway: at most max_sessions / idle timeout new client sources per second are sustained
# (65536 / 60 s is about 1100 per second); Envoy's own circuit breaker default is 1024 sessions.
DEFAULT_MAX_SESSIONS = 65536
# Every session holds one socket: a process cannot open more than the kernel's default fs.nr_open.
MAX_SESSIONS_LIMIT = 1_048_576
DEFAULT_IDLE_TIMEOUT_MS = 60_000
MIN_IDLE_TIMEOUT_MS = 1000
MAX_IDLE_TIMEOUT_MS = 86_400_000


def max_sessions(of: str, alias: str | None = None) -> Any:
    """The field of the most sessions `of` ("this listener") may have at once."""
    return Field(
        default=DEFAULT_MAX_SESSIONS,
        alias=alias,
        ge=1,
        le=MAX_SESSIONS_LIMIT,
        description=(
            f"Most concurrent UDP sessions (client source address and port) of {of}, 1 to "
            f"{MAX_SESSIONS_LIMIT}; a datagram that would open one more is dropped."
        ),
    )


def idle_timeout(alias: str | None = None) -> Any:
    return Field(
        default=DEFAULT_IDLE_TIMEOUT_MS,
        alias=alias,
        ge=MIN_IDLE_TIMEOUT_MS,
        le=MAX_IDLE_TIMEOUT_MS,
        description=(
            f"Milliseconds without a datagram before a UDP session is closed, {MIN_IDLE_TIMEOUT_MS} to "
            f"{MAX_IDLE_TIMEOUT_MS} (a day)."
        ),
    )
