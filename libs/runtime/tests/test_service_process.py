"""A service process end to end: OTLP spans reach a real OTLP/HTTP receiver, SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap

from aiohttp import web

SERVICE = textwrap.dedent(
    """
    import asyncio, sys
    from tollgate.runtime.service import run
    from tollgate.runtime.settings import ServiceSettings

    async def main(settings, context):
        with context.telemetry.tracer("probe").start_as_current_span("reconcile probe"):
            pass
        print("READY", context.health.port, flush=True)
        await context.stop.wait()

    sys.exit(run("probe", "probe service", ServiceSettings, main))
    """
)


async def test_spans_exported_and_sigterm_stops_cleanly() -> None:
    received: list[bytes] = []
    got_span = asyncio.Event()

    async def traces(request: web.Request) -> web.Response:
        received.append(await request.read())
        got_span.set()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "TOLLGATE_HEALTH_PORT": "0",
        "TOLLGATE_HEALTH_HOST": "127.0.0.1",
        "TOLLGATE_SERVICE_NAME": "probe",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVICE, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.startswith(b"READY")
        await asyncio.wait_for(got_span.wait(), 30)
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
        logs = [json.loads(raw) for raw in (await process.stderr.read()).decode().splitlines() if raw.startswith("{")]
    finally:
        if process.returncode is None:
            process.kill()
        await runner.cleanup()
    assert code == 0
    assert b"reconcile probe" in b"".join(received)
    messages = [entry["message"] for entry in logs]
    assert messages[0] == "started" and logs[0]["otlp_export"] is True
    assert "stopping: signal received" in messages and messages[-1] == "stopped"
