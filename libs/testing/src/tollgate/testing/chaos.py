"""The chaos suite's table: one row per fault and check a user would make, with the measured recovery time and
what was lost. Checks wait for their condition (never a fixed sleep) and record how long it took from a moment
the test names (the fault's end, or its start when the system is meant to converge while it lasts)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tollgate.testing.agents import Agent
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fakedo import FakeDigitalOcean
from tollgate.testing.faultproxy import FaultProxy
from tollgate.testing.nodes import Nodes
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import ConditionTimeoutError, eventually

NOTHING = "nothing"


@dataclass(frozen=True)
class Row:
    fault: str
    check: str
    seconds: float | None  # None: did not recover within the bound
    lost: str


@dataclass
class ChaosTable:
    rows: list[Row] = field(default_factory=list)

    def record(self, fault: str, check: str, seconds: float | None, lost: str = NOTHING) -> None:
        self.rows.append(Row(fault, check, seconds, lost))

    async def recover(
        self,
        fault: str,
        check: str,
        probe: Callable[[], Any],
        since: float,
        bound: float,
    ) -> Any:
        """Wait until `probe` (a function or a coroutine function) returns something truthy, at most `bound`
        seconds after `since` (time.monotonic()); record the row, with the seconds from `since`, or as not
        recovered, and raise."""

        async def awaited() -> Any:
            result = probe()
            return await result if inspect.isawaitable(result) else result

        try:
            found = await eventually(awaited, check, timeout=max(since + bound - time.monotonic(), 0.5), interval=0.2)
        except ConditionTimeoutError:
            self.record(fault, check, None, f"not recovered within {bound:.0f} s")
            raise
        self.record(fault, check, time.monotonic() - since)
        return found

    def lost(self, fault: str, check: str, since: float, lost: list[str]) -> None:
        """Record a check of what must not be lost (`lost` lists what was), and fail if anything was."""
        self.record(fault, check, time.monotonic() - since, "; ".join(lost) or NOTHING)
        assert not lost, f"{fault}: {check}: lost {lost}"

    def render(self) -> str:
        header = ("fault", "what was checked", "recovered in (s)", "lost")
        cells = [(r.fault, r.check, "-" if r.seconds is None else f"{r.seconds:.1f}", r.lost) for r in self.rows]
        widths = [max(len(row[i]) for row in [header, *cells]) for i in range(4)]

        def line(row: tuple[str, str, str, str]) -> str:
            return "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"

        rule = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
        return "\n".join([line(header), rule, *(line(row) for row in cells)])


NAMESPACE = "chaos"
DO_TOKEN = "chaos-token"
DO_SECRET = "digitalocean-token"  # the one Secret the routedip chart lets it read (tokenSecrets)
DO_CLASS = "chaos-do"
DROPLETS = (400000, 400001, 400002)  # the providerIDs of the cluster's three nodes
WATCH_SECONDS = 10  # the services give a hung watch up after 15 s (KubeTimeouts.watch_client)
REQUEST_SECONDS = 5
LEASE_SECONDS = 6
SERVICES = ("xds", "jobs", "routedip", "allocator")


@dataclass
class System:
    """The running system the chaos tests share: its cluster, services (by name), the FaultProxy in front of each
    service's API connection, the fake DigitalOcean API, the Envoy pod `edge` and the echo server behind it, and
    the EPIC account whose load balancer `lb` takes registrations."""

    cluster: EmbeddedCluster
    custom: client.CustomObjectsApi
    services: dict[str, ServiceProcess]
    proxies: dict[str, FaultProxy]
    fake: FakeDigitalOcean
    nodes: Nodes
    echo_target: str
    envoy_ip: str
    envoy_container: str
    allocator_port: int
    allocator_agent: Agent  # the account's token and the allocator's CA
    account: str

    def restart(self, name: str) -> ServiceProcess:
        """Start a service that was killed again, as a kubelet would: same settings, same log."""
        service = self.services[name]
        service.stop()  # reaps the killed process, closes its log
        return service.start().wait_ready(timeout=60)

    def exited(self) -> list[str]:
        """The services that exited by themselves since they were last started (a crash the table counts)."""
        return [
            f"{name} exited with {service.process.returncode}"
            for name, service in self.services.items()
            if service.process is not None and service.process.poll() is not None
        ]

    def service_logs(self) -> str:
        return "".join(
            f"\n----- logs of {name} ({s.log_path}) -----\n{s.logs()[-15000:]}" for name, s in self.services.items()
        )


TABLE = ChaosTable()  # filled by the chaos tests, printed by their conftest at the end of the run
