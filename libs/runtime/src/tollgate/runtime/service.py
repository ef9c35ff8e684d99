"""How every service starts and stops: parse settings, set up logging and telemetry, serve health,
run the service's coroutine, and stop gracefully on SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import AliasChoices

from tollgate.runtime.health import HealthServer
from tollgate.runtime.kube import use_timeouts
from tollgate.runtime.logging import setup_logging
from tollgate.runtime.settings import ServiceSettings
from tollgate.runtime.telemetry import Telemetry, setup_telemetry

SettingsT = TypeVar("SettingsT", bound=ServiceSettings)
log = logging.getLogger("tollgate.runtime")


@dataclass
class ServiceContext:
    health: HealthServer
    telemetry: Telemetry
    stop: asyncio.Event


ServiceMain = Callable[[SettingsT, ServiceContext], Coroutine[Any, Any, None]]


def settings_help(settings_class: type[ServiceSettings]) -> str:
    prefix = settings_class.model_config.get("env_prefix", "")
    lines = ["environment:"]
    for name, field in settings_class.model_fields.items():
        default = "" if field.is_required() else f" (default: {field.get_default(call_default_factory=True)})"
        alias = field.validation_alias
        variable = alias.choices[0] if isinstance(alias, AliasChoices) else alias or f"{prefix}{name.upper()}"
        lines.append(f"  {variable!s:<28} {field.description or ''}{default}")
    return "\n".join(lines)


async def serve(settings: SettingsT, main: ServiceMain[SettingsT]) -> None:
    use_timeouts(settings.kube_timeouts())
    telemetry = setup_telemetry(settings.service_name)
    health = HealthServer(settings.health_host, settings.health_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await health.start()
    log.info("started", extra={"health_port": health.port, "otlp_export": telemetry.exporting})
    task = asyncio.create_task(main(settings, ServiceContext(health, telemetry, stop)))
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            log.info("stopping: signal received")
            health.stopping.set()
            try:
                await asyncio.wait_for(task, timeout=30)
            except TimeoutError:
                log.warning("service did not stop within 30 s; cancelling")
                task.cancel()
        await task
    finally:
        stopper.cancel()
        await health.stop()
        telemetry.shutdown()
        log.info("stopped")


def run(
    prog: str,
    description: str,
    settings_class: type[SettingsT],
    main: ServiceMain[SettingsT],
    argv: list[str] | None = None,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> int:
    """Entry point of a service's `__main__`: `python -m tollgate.<name> [--help]`, on a new event loop from
    `loop_factory` (default: asyncio's own)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=settings_help(settings_class),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(argv)
    settings = settings_class()
    setup_logging(settings.service_name, settings.log_level, settings.log_format)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(settings, main))
    except Exception:
        log.exception("service failed")
        return 1
    return 0
