"""Benchmark of tollgate-xds: convergence time, CPU and memory with E real Envoys and L listeners.

The server runs in this process (world, ADS over gRPC on loopback) and E real Envoy processes connect to it,
each with its own loopback address for its listeners. VirtualServices of 10 UDP listeners each (EDS clusters)
select every Envoy. After the initial sync, one VirtualService at a time changes (a listener's port and its
endpoint's port) and the time from the change to every Envoy having ACKed it is measured.

Two paths in the same run:
- incremental: delta xDS, only what changed is sent (the service's path);
- full resend (baseline): state-of-the-world, every resource of every type sent again on each change.

    .venv/bin/python -m bench.xds                 # E in (1, 10), L in (10, 1000): about two minutes
    .venv/bin/python -m bench.xds --envoys 1 10 50 --listeners 10 1000

(As a module: run as a script, this file would shadow the `xds` package of xds-protos.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc

from bench.measure import rss_mib
from tollgate.models.envoy import LISTENER_ADDRESS_KEY, ads_bootstrap
from tollgate.testing.envoy import EnvoyProcess, bind_to_pod, envoy_pod_object
from tollgate.testing.net import free_port
from tollgate.xds.grpc.ads import AggregatedDiscoveryService
from tollgate.xds.resources import Resources
from tollgate.xds.server import XdsServer
from tollgate.xds.streams import Stream

NAMESPACE = "bench"
LISTENERS_PER_VS = 10
BASE_PORT = 20000


class FullResend(Stream):
    """The baseline: on any change, every resource of every type is sent again (state of the world)."""

    def set_desired(self, resources: Resources) -> bool:
        changed = super().set_desired(resources)
        if changed:
            for type_url, state in self.types.items():
                state.force.update(self.desired[type_url])
                state.respond = state.seen
        return changed


def virtual_service(index: int, shift: int = 0) -> dict[str, Any]:
    listeners = []
    for number in range(LISTENERS_PER_VS):
        unit = index * LISTENERS_PER_VS + number
        port = BASE_PORT + unit + (shift if number == 0 else 0)
        listeners.append(
            {
                "name": f"vs{index}-l{number}",
                "udp": {
                    "port": port,
                    "cluster": {
                        "name": f"vs{index}-c{number}",
                        "service_discovery": "eds",
                        "endpoints": [
                            {
                                "name": "e",
                                "host": {"address": "127.0.0.1"},
                                "port": 9000 + (shift if number == 0 else 0),
                            }
                        ],
                    },
                },
            }
        )
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": f"vs{index}",
            "namespace": NAMESPACE,
            "creationTimestamp": f"2026-01-01T00:00:{index % 60:02d}Z",
            "generation": 1 + shift,
            "uid": f"uid-{index}",
        },
        "spec": {"selector": {"app": "bench"}, "listeners": listeners},
    }


@dataclass
class Result:
    mode: str
    envoys: int
    listeners: int
    initial_sync: float
    p50: float
    p99: float
    cpu_per_change: float
    responses_per_change: float
    rss_mb: float


def envoy_address(index: int) -> str:
    """The loopback address of Envoy `index`: its pod IP, its admin and listeners' address, its xDS source."""
    return f"127.88.{index // 250}.{index % 250 + 1}"


@contextlib.asynccontextmanager
async def envoys(count: int, port: int, delta: bool, log_dir: Path) -> AsyncIterator[list[EnvoyProcess]]:
    started: list[EnvoyProcess] = []
    try:
        for batch in range(0, count, 10):
            group = []
            for index in range(batch, min(batch + 10, count)):
                address = envoy_address(index)
                bootstrap = bind_to_pod(ads_bootstrap("127.0.0.1", port, delta=delta), address)
                bootstrap["node"] = {
                    "id": f"envoy-{index}.{NAMESPACE}",
                    "cluster": NAMESPACE,
                    "metadata": {LISTENER_ADDRESS_KEY: address},
                }
                envoy = EnvoyProcess(
                    bootstrap,
                    admin_host=address,
                    log_level="warning",
                    log_path=log_dir / f"envoy-{index}.log",
                    extra_args=["--concurrency", "1"],
                )
                group.append(envoy)
            started.extend(group)
            await asyncio.gather(*(envoy.start(timeout=300) for envoy in group))
        yield started
    finally:
        await asyncio.gather(*(envoy.stop() for envoy in started), return_exceptions=True)


async def wait_until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the Envoys did not converge")
        await asyncio.sleep(0.005)


async def measure(mode: str, envoy_count: int, listener_count: int, changes: int, log_dir: Path) -> Result:
    delta = mode == "incremental"
    server = XdsServer(stream_class=Stream if delta else FullResend)
    grpc_server = grpc.aio.server()
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(AggregatedDiscoveryService(server), grpc_server)
    port = free_port()
    grpc_server.add_insecure_port(f"127.0.0.1:{port}")
    await grpc_server.start()
    stop = asyncio.Event()
    runner = asyncio.create_task(server.run(stop))
    vs_count = max(1, listener_count // LISTENERS_PER_VS)
    for index in range(vs_count):
        server.world.set_virtual_service(virtual_service(index))
    for index in range(envoy_count):  # the pods tollgate-xds admits the Envoys as
        server.world.set_pod(envoy_pod_object(f"envoy-{index}", NAMESPACE, envoy_address(index), {"app": "bench"}))
    server.recompute()

    def all_synced() -> bool:
        conns = list(server.connections.values())
        return len(conns) == envoy_count and all(c.stream.in_sync() for c in conns)

    try:
        started = time.monotonic()
        async with envoys(envoy_count, port, delta, log_dir / f"{mode}-{envoy_count}-{listener_count}"):
            await wait_until(all_synced, 600)
            initial = time.monotonic() - started
            samples: list[float] = []
            server.on_converged.append(samples.append)
            pushes_before = sum(s.pushes for c in server.connections.values() for s in c.stream.types.values())
            cpu_before = time.process_time()
            for change in range(changes):
                target = change % vs_count
                obj = copy.deepcopy(virtual_service(target, shift=1000 + change))
                server.world.set_virtual_service(obj)
                server.changed()
                await wait_until(lambda want=change + 1: len(samples) >= want, 120)
            cpu = time.process_time() - cpu_before
            pushes = sum(s.pushes for c in server.connections.values() for s in c.stream.types.values()) - pushes_before
            quantiles = statistics.quantiles(samples, n=100) if len(samples) > 1 else [samples[0]] * 99
            return Result(
                mode=mode,
                envoys=envoy_count,
                listeners=listener_count,
                initial_sync=initial,
                p50=quantiles[49],
                p99=quantiles[98],
                cpu_per_change=cpu / changes,
                responses_per_change=pushes / changes,
                rss_mb=rss_mib(),
            )
    finally:
        stop.set()
        await runner
        await grpc_server.stop(0)


def table(results: list[Result]) -> str:
    header = (
        "| Envoys | listeners | path | initial sync s | p50 ms | p99 ms | CPU ms/change | responses/change "
        "| RSS MB | p99 full/incr | CPU full/incr |"
    )
    lines = [header, "|" + "---|" * 11]
    by_key = {(r.envoys, r.listeners, r.mode): r for r in results}
    for r in results:
        base = by_key.get((r.envoys, r.listeners, "full resend"))
        ratios = ("", "")
        if r.mode == "incremental" and base is not None:
            ratios = (f"{base.p99 / r.p99:.1f}x", f"{base.cpu_per_change / r.cpu_per_change:.1f}x")
        lines.append(
            f"| {r.envoys} | {r.listeners} | {r.mode} | {r.initial_sync:.1f} | {r.p50 * 1000:.0f} | {r.p99 * 1000:.0f} "
            f"| {r.cpu_per_change * 1000:.1f} | {r.responses_per_change:.0f} | {r.rss_mb:.0f} "
            f"| {ratios[0]} | {ratios[1]} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envoys", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--listeners", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--changes", type=int, default=30, help="changes measured per configuration")
    parser.add_argument("--log-dir", type=Path, default=Path(".dev/bench-xds"))
    parser.add_argument(
        "--paths", nargs="+", default=["full resend", "incremental"], choices=["full resend", "incremental"]
    )
    args = parser.parse_args()
    results = []
    for envoy_count in args.envoys:
        for listener_count in args.listeners:
            for mode in args.paths:
                result = await measure(mode, envoy_count, listener_count, args.changes, args.log_dir)
                print(
                    f"{mode:>12}: {envoy_count} Envoys, {listener_count} listeners: p99 {result.p99 * 1000:.0f} ms",
                    flush=True,
                )
                results.append(result)
    print()
    print(table(results))


if __name__ == "__main__":
    asyncio.run(main())
