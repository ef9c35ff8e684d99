from __future__ import annotations

import re

import aiohttp
from opentelemetry import metrics

from tollgate.runtime.health import HealthServer
from tollgate.runtime.telemetry import setup_telemetry


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_health_readiness_and_metrics() -> None:
    setup_telemetry("health-test")
    metrics.get_meter("test").create_counter("tollgate_test_things", description="things").add(3)
    server = HealthServer("127.0.0.1", 0)
    ready = {"value": False}
    server.add_readiness_check("watch", lambda: ready["value"] or "watch not started")
    await server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert await get(f"{base}/healthz") == (200, "ok\n")
        assert await get(f"{base}/readyz") == (503, "watch: watch not started\n")
        ready["value"] = True
        assert await get(f"{base}/readyz") == (200, "ok\n")
        status, text = await get(f"{base}/metrics")
        assert status == 200
        assert re.search(r"^tollgate_test_things_total(\{[^}]*\})? 3.0$", text, re.MULTILINE)
        server.stopping.set()
        assert await get(f"{base}/readyz") == (503, "shutdown: shutting down\n")
    finally:
        await server.stop()


async def test_a_raising_check_reports_not_ready() -> None:
    server = HealthServer("127.0.0.1", 0)

    def broken() -> bool:
        raise RuntimeError("cache gone")

    server.add_readiness_check("cache", broken)
    assert server.readiness() == {"cache": "RuntimeError: cache gone"}
