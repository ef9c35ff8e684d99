"""Stopping a grpc.aio server that shares its event loop with kopf."""

from __future__ import annotations

import asyncio
from typing import Protocol


class Server(Protocol):
    async def stop(self, grace: float | None) -> None: ...


async def stop_grpc_server(server: Server, grace: float) -> None:
    """Stop serving after `grace` seconds for the calls in progress.

    kopf cancels, as hung, the tasks started while it ran, grpcio's serving tasks among them; grpcio then re-raises
    that cancellation from `stop`. Only a cancellation of the caller's own task propagates."""
    try:
        await server.stop(grace)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
