"""The HTTP surface every service has: /healthz (alive), /readyz (every readiness check passes), /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import prometheus_client
from aiohttp import web

ReadinessCheck = Callable[[], bool | str]


class HealthServer:
    """Serves health and Prometheus metrics; a readiness check returns True, or a reason it is not ready."""

    def __init__(self, host: str = "0.0.0.0", port: int = 8080) -> None:
        self.host = host
        self.port = port
        self._checks: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None
        self.stopping = asyncio.Event()

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def readiness(self) -> dict[str, str]:
        """Reasons for not being ready, by check name; empty when ready."""
        failures = {}
        if self.stopping.is_set():
            failures["shutdown"] = "shutting down"
        for name, check in self._checks.items():
            try:
                result = check()
            except Exception as error:  # a failing check means not ready, never a crashed endpoint
                result = f"{type(error).__name__}: {error}"
            if result is not True:
                failures[name] = str(result) if result else "not ready"
        return failures

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        failures = self.readiness()
        if failures:
            text = "".join(f"{name}: {reason}\n" for name, reason in sorted(failures.items()))
            return web.Response(status=503, text=text)
        return web.Response(text="ok\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self.stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
