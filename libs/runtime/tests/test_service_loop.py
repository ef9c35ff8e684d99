"""A service runs on the event loop its `__main__` asks `run()` for (the webhook asks for uvloop's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SERVICE = textwrap.dedent(
    """
    import asyncio, sys
    from tollgate.runtime.service import run
    from tollgate.runtime.settings import ServiceSettings

    class ProbeLoop(asyncio.SelectorEventLoop):
        pass

    async def main(settings, context):
        print("LOOP", type(asyncio.get_running_loop()).__name__, flush=True)

    sys.exit(run("probe", "probe service", ServiceSettings, main, loop_factory=ProbeLoop))
    """
)


def test_the_service_runs_on_the_loop_from_its_factory() -> None:
    env = {**os.environ, "TOLLGATE_HEALTH_PORT": "0", "TOLLGATE_HEALTH_HOST": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", SERVICE], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "LOOP ProbeLoop" in done.stdout.splitlines()
