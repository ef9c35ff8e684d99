"""tollgate-xds against go-control-plane: convergence time, CPU and memory with E real Envoys and L listeners.

E real Envoy processes connect to the server under test, each with its own loopback address for its listeners.
VirtualServices of 10 UDP listeners each (EDS clusters) select every Envoy. After the initial sync, one
VirtualService at a time changes (a listener's port and its endpoint's port) and the time from the change reaching
the server to every Envoy having ACKed it is measured, with the server's CPU per change and its RSS.

Four paths in the same run, the same Envoys, resources and changes (each measurement in a fresh process of its own):
- tollgate delta: the service's server (in this process), delta xDS, only what changed is sent;
- tollgate SotW: the same server, Envoys on state-of-the-world ADS (every resource of a changed type is sent);
- go-control-plane SotW and delta: bench/gcp, go-control-plane v0.14.0 (SnapshotCache over ADS; a LinearCache per
  type behind a MuxCache for delta) serving the resources tollgate's translator builds, fed each change through
  its control API. The translation runs in this process and is not counted as its CPU.
Optional: "tollgate full resend", every resource of every type sent again on each change (the old baseline).

    .venv/bin/python -m bench.xds --quick                 # 1 Envoy x 10 listeners, a few changes: seconds
    .venv/bin/python -m bench.xds                         # the issue's rows: 1 x 10, 10 x 1000, 50 x 1000
    .venv/bin/python -m bench.xds --sizes 100x1000 --changes 10
    .venv/bin/python -m bench.xds --envoys 1 10 25 --listeners 1000   # every pairing (the curves)

(As a module: run as a script, this file would shadow the `xds` package of xds-protos.)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc

from bench import gobuild, report
from bench.measure import MB_PER_MIB, rss_mib
from tollgate.models.envoy import LISTENER_ADDRESS_KEY, ads_bootstrap
from tollgate.testing.envoy import EnvoyProcess, bind_to_pod, envoy_pod_object
from tollgate.testing.net import free_port, free_ports
from tollgate.testing.wait import eventually
from tollgate.xds.grpc.ads import AggregatedDiscoveryService
from tollgate.xds.identity import Identity
from tollgate.xds.resources import CLUSTER, ENDPOINT, LISTENER, Resources
from tollgate.xds.server import XdsServer
from tollgate.xds.streams import Stream

# An Envoy is started once it has its first listeners; at 5000 it warms 5000 EDS clusters first, then validates
# about 22 listeners a second (10 x 5000 at load 45: 4 minutes for the first, 300 s was not enough).
ENVOY_START_SECONDS = 900
NAMESPACE = "bench"
LISTENERS_PER_VS = 10
BASE_PORT = 20000
# Every cluster's endpoint: an address the default endpoint policy allows (TEST-NET-1); no traffic is sent there.
UPSTREAM = "192.0.2.10"
PATHS = ("tollgate delta", "tollgate SotW", "go-control-plane SotW", "go-control-plane delta")
# Changes measured per path unless --changes says otherwise. The p99 target is the delta paths': over 100 changes
# it is a percentile, where over 15 it was the slowest change. A SotW change at 50 x 1000 takes about 2 s.
DELTA_CHANGES = 100
SOTW_CHANGES = 15


def changes_for(path: str, changes: int | None) -> int:
    if changes is not None:
        return changes
    return DELTA_CHANGES if path.endswith("delta") else SOTW_CHANGES


BASELINE = "tollgate full resend"
# What go-control-plane's resources are serialised on: bench/gcp binds each listener to its Envoy's address.
ANY_ADDRESS = "0.0.0.0"
GCP_FIELDS = {LISTENER: "listeners", CLUSTER: "clusters", ENDPOINT: "endpoints"}


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
                                "host": {"address": UPSTREAM},
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
    path: str
    envoys: int
    listeners: int
    initial_sync: float
    p50: float
    p99: float
    cpu_per_change: float
    rss_mb: float
    load: float  # the machine's 1-minute load average when the measurement ended (other work shares the machine)
    changes: int = 0  # how many changes p50 and p99 are over (0: not recorded, results from before it was)


def node_id(index: int) -> str:
    return f"envoy-{index}.{NAMESPACE}"


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
                    "id": node_id(index),
                    "cluster": NAMESPACE,
                    "metadata": {LISTENER_ADDRESS_KEY: address},
                }
                envoy = EnvoyProcess(
                    bootstrap,
                    admin_host=envoy_address(index),
                    log_level="warning",
                    log_path=log_dir / f"envoy-{index}.log",
                    extra_args=["--concurrency", "1"],
                )
                group.append(envoy)
            started.extend(group)
            await asyncio.gather(*(envoy.start(timeout=ENVOY_START_SECONDS) for envoy in group))
        yield started
    finally:
        await asyncio.gather(*(envoy.stop() for envoy in started), return_exceptions=True)


async def check(started: list[EnvoyProcess], change: int, vs_count: int) -> None:
    """What a user would check after the run: the first and last Envoy run the last change (the listener on the
    Envoy's own address at its new port, the cluster's endpoint at its new port)."""
    target, shift = change % vs_count, 1000 + change
    prefix = f"{NAMESPACE}/vs{target}/vs{target}"
    for index in sorted({0, len(started) - 1}):
        envoy = started[index]
        bound = {s["name"]: s["local_address"]["socket_address"] for s in await envoy.listeners()}
        socket = bound.get(f"{prefix}-l0", {})
        want = (envoy_address(index), BASE_PORT + target * LISTENERS_PER_VS + shift)
        if (socket.get("address"), socket.get("port_value")) != want:
            raise RuntimeError(f"Envoy {index}: listener {prefix}-l0 is on {socket}, not {want}")
        endpoint = f"{prefix}-c0::{UPSTREAM}:{9000 + shift}::"
        if endpoint not in await envoy.clusters():
            raise RuntimeError(f"Envoy {index}: cluster {prefix}-c0 has no endpoint {UPSTREAM}:{9000 + shift}")


def summary(
    path: str, envoy_count: int, listener_count: int, initial: float, samples: list[float], cpu: float, rss_mib: float
) -> Result:
    quantiles = statistics.quantiles(samples, n=100) if len(samples) > 1 else [samples[0]] * 99
    rss_mb = rss_mib * MB_PER_MIB
    return Result(
        path,
        envoy_count,
        listener_count,
        initial,
        quantiles[49],
        quantiles[98],
        cpu / len(samples),
        rss_mb,
        load(),
        len(samples),
    )


def load() -> float:
    return os.getloadavg()[0]


@contextlib.contextmanager
def profiled(svg: Path | None) -> Iterator[None]:
    """py-spy samples this process (without stopping it) into a flame graph at `svg`, if given."""
    if svg is None:
        yield
        return
    svg.parent.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "--rate", "250"]
    spy = subprocess.Popen([*command, "--pid", str(os.getpid()), "--output", str(svg)])
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


async def measure_tollgate(
    path: str,
    envoy_count: int,
    listener_count: int,
    changes: int,
    log_dir: Path,
    debounce: float,
    profile: Path | None = None,
) -> Result:
    delta = path == "tollgate delta"
    server = XdsServer(debounce=debounce, stream_class=FullResend if path == BASELINE else Stream)
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

    async def all_synced() -> bool:
        conns = list(server.connections.values())
        return len(conns) == envoy_count and all(c.stream.in_sync() for c in conns)

    try:
        started = time.monotonic()
        async with envoys(envoy_count, port, delta, log_dir / f"{path}-{envoy_count}-{listener_count}") as running:
            await eventually(all_synced, "every Envoy in sync", timeout=600, interval=0.005)
            initial = time.monotonic() - started
            samples: list[float] = []
            server.on_converged.append(samples.append)
            cpu_before = time.process_time()
            with profiled(profile):
                for change in range(changes):
                    server.world.set_virtual_service(copy.deepcopy(virtual_service(change % vs_count, 1000 + change)))
                    server.changed()

                    async def converged(want: int = change + 1) -> bool:
                        return len(samples) >= want

                    await eventually(converged, f"every Envoy ACKing change {change + 1}", timeout=120, interval=0.005)
            cpu = time.process_time() - cpu_before
            await check(running, changes - 1, vs_count)
            return summary(path, envoy_count, listener_count, initial, samples, cpu, rss_mib())
    finally:
        stop.set()
        await runner
        await grpc_server.stop(0)


class Translation:
    """The workload as tollgate translates it, for another server: the resources of one Envoy whose listeners are
    on ANY_ADDRESS, and after each change the resources whose version changed."""

    def __init__(self, vs_count: int) -> None:
        self.server = XdsServer()
        for index in range(vs_count):
            self.server.world.set_virtual_service(virtual_service(index))
        self.server.recompute()
        self.conn = self.server.connect(Identity(node_id(0), NAMESPACE, "envoy-0", (("app", "bench"),)), delta=True)

    def resources(self) -> Resources:
        return self.conn.stream.desired

    def change(self, obj: dict[str, Any]) -> Resources:
        before = {type_url: dict(resources) for type_url, resources in self.resources().items()}
        self.server.world.set_virtual_service(obj)
        self.server.recompute()
        return {
            type_url: {
                name: r
                for name, r in resources.items()
                if (old := before[type_url].get(name)) is None or old.version != r.version
            }
            for type_url, resources in self.resources().items()
        }


def gcp_payload(resources: Resources) -> dict[str, list[str]]:
    """bench/gcp's body: each resource's serialised message in base64, by type."""
    return {
        GCP_FIELDS[type_url]: [base64.b64encode(r.packed).decode() for r in by_name.values() if r.packed is not None]
        for type_url, by_name in resources.items()
    }


def start_gcp(mode: str, xds_port: int, control_port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """bench/gcp (built once into the tools cache), its output in `log_path`."""
    command = [str(gobuild.build("gcp")), "-mode", mode]
    command += ["-xds", f"127.0.0.1:{xds_port}", "-control", f"127.0.0.1:{control_port}"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


async def measure_gcp(path: str, envoy_count: int, listener_count: int, changes: int, log_dir: Path) -> Result:
    mode = "delta" if path.endswith("delta") else "sotw"
    vs_count = max(1, listener_count // LISTENERS_PER_VS)
    translation = Translation(vs_count)
    xds_port, control_port = free_ports(2)
    process = start_gcp(mode, xds_port, control_port, log_dir / f"{path}-{envoy_count}-{listener_count}.log")
    base = f"http://127.0.0.1:{control_port}"
    timeout = aiohttp.ClientTimeout(total=900)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:

            async def call(method: str, route: str, body: object = None) -> dict[str, float]:
                async with http.request(method, base + route, json=body) as response:
                    if response.status != 200:
                        raise RuntimeError(f"bench/gcp {method} {route}: {response.status} {await response.text()}")
                    answer: dict[str, float] = await response.json()
                    return answer

            async def stats() -> dict[str, float]:
                return await call("GET", "/stats")

            await eventually(stats, "bench/gcp's control API", timeout=30, ignore=(aiohttp.ClientError,))
            nodes = {node_id(index): envoy_address(index) for index in range(envoy_count)}
            first = await call("PUT", "/resources", {"nodes": nodes, **gcp_payload(translation.resources())})
            started = time.monotonic()
            async with envoys(
                envoy_count, xds_port, mode == "delta", log_dir / f"{path}-{envoy_count}-{listener_count}"
            ) as running:
                await call("GET", f"/converged?change={first['change']:.0f}&timeout=600")
                initial = time.monotonic() - started
                samples: list[float] = []
                cpu_before = (await stats())["cpu_seconds"]
                for change in range(changes):
                    changed = translation.change(copy.deepcopy(virtual_service(change % vs_count, 1000 + change)))
                    number = (await call("POST", "/change", gcp_payload(changed)))["change"]
                    samples.append((await call("GET", f"/converged?change={number:.0f}&timeout=120"))["seconds"])
                after = await stats()
                cpu = after["cpu_seconds"] - cpu_before
                await check(running, changes - 1, vs_count)
                return summary(path, envoy_count, listener_count, initial, samples, cpu, after["rss_mib"])
    finally:
        process.terminate()
        process.wait(timeout=10)


def table(results: list[Result]) -> str:
    """One row per Envoys x listeners, one group of columns per path: p50, p99, CPU per change and RSS."""
    paths = list(dict.fromkeys(r.path for r in results))
    header = "| Envoys x listeners | " + " | ".join(f"{p}: p50 / p99 ms, CPU ms/change, RSS MB" for p in paths) + " |"
    lines = [header, "| --- |" + " --- |" * len(paths)]
    by_key = {(r.envoys, r.listeners, r.path): r for r in results}
    for envoy_count, listener_count in dict.fromkeys((r.envoys, r.listeners) for r in results):
        cells = []
        for p in paths:
            r = by_key.get((envoy_count, listener_count, p))
            cells.append(
                ""
                if r is None
                else f"{r.p50 * 1000:.0f} / {r.p99 * 1000:.0f}, {r.cpu_per_change * 1000:.1f}, {r.rss_mb:.0f}"
            )
        lines.append(f"| {envoy_count} x {listener_count} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Initial sync, seconds: "
        + "; ".join(f"{r.envoys}x{r.listeners} {r.path} {r.initial_sync:.1f}" for r in results)
    )
    return "\n".join(lines)


TARGET_P99 = 1.2  # tollgate delta's p99 at most this times go-control-plane delta's
TARGET_CPU = 2.0  # tollgate delta's server CPU per change at most this times go-control-plane delta's
TARGET_RSS = 150.0  # MB, tollgate's server process at 50 x 1000
TARGET_AT = (50, 1000)


def over(*results: Result) -> str:
    """How many changes a p99 row is over, when its results say (and say the same)."""
    counts = {r.changes for r in results}
    return f" of {counts.pop()} changes" if len(counts) == 1 and 0 not in counts else ""


def rows(results: list[dict[str, Any]]) -> list[report.Row]:
    """The combined table's rows (bench/report.py): at each Envoys x listeners measured with both, tollgate delta
    against go-control-plane delta (p99, CPU per change, RSS) and tollgate SotW against go-control-plane SotW (p99).
    The targets hold at 50 x 1000, and are judged there only (at 1 x 10 a Python process's fixed costs dominate)."""
    by_key = {(r["envoys"], r["listeners"], r["path"]): Result(**r) for r in results}
    out = []
    for envoy_count, listener_count in dict.fromkeys((r["envoys"], r["listeners"]) for r in results):
        size = f"{envoy_count} x {listener_count}"
        delta = by_key.get((envoy_count, listener_count, "tollgate delta"))
        gcp_delta = by_key.get((envoy_count, listener_count, "go-control-plane delta"))
        judged = (envoy_count, listener_count) == TARGET_AT
        if delta is not None and gcp_delta is not None:
            p99 = report.ratio(delta.p99, gcp_delta.p99)
            cpu = report.ratio(delta.cpu_per_change, gcp_delta.cpu_per_change)
            out += [
                report.Row(
                    f"xds {size}: delta p99{over(delta, gcp_delta)}, change to every Envoy ACKing it",
                    f"{delta.p99 * 1000:.0f} ms",
                    f"{gcp_delta.p99 * 1000:.0f} ms (go-control-plane delta)",
                    p99,
                    f"<= {TARGET_P99}x at 50 x 1000",
                    (p99 is not None and p99 <= TARGET_P99) if judged else None,
                ),
                report.Row(
                    f"xds {size}: delta server CPU per change",
                    f"{delta.cpu_per_change * 1000:.1f} ms",
                    f"{gcp_delta.cpu_per_change * 1000:.1f} ms (go-control-plane delta)",
                    cpu,
                    f"<= {TARGET_CPU}x at 50 x 1000",
                    (cpu is not None and cpu <= TARGET_CPU) if judged else None,
                ),
                report.Row(
                    f"xds {size}: delta server RSS",
                    f"{delta.rss_mb:.0f} MB",
                    f"{gcp_delta.rss_mb:.0f} MB (go-control-plane delta)",
                    report.ratio(delta.rss_mb, gcp_delta.rss_mb),
                    f"< {TARGET_RSS:.0f} MB at 50 x 1000",
                    delta.rss_mb < TARGET_RSS if judged else None,
                ),
            ]
        sotw = by_key.get((envoy_count, listener_count, "tollgate SotW"))
        gcp_sotw = by_key.get((envoy_count, listener_count, "go-control-plane SotW"))
        if sotw is not None and gcp_sotw is not None:
            out.append(
                report.Row(
                    f"xds {size}: SotW p99{over(sotw, gcp_sotw)}, change to every Envoy ACKing it",
                    f"{sotw.p99 * 1000:.0f} ms",
                    f"{gcp_sotw.p99 * 1000:.0f} ms (go-control-plane SotW)",
                    report.ratio(sotw.p99, gcp_sotw.p99),
                    "-",
                    None,
                )
            )
    return out


async def measure_one(path: str, envoy_count: int, listener_count: int, args: argparse.Namespace) -> Result:
    if path.startswith("go-control-plane"):
        return await measure_gcp(path, envoy_count, listener_count, changes_for(path, args.changes), args.log_dir)
    return await measure_tollgate(
        path,
        envoy_count,
        listener_count,
        changes_for(path, args.changes),
        args.log_dir,
        args.debounce_ms / 1000,
        args.profile,
    )


def measure_in_own_process(path: str, envoy_count: int, listener_count: int, args: argparse.Namespace) -> Result:
    """One measurement in a fresh `python -m bench.xds` of its own: tollgate's server runs in the bench's process,
    so its RSS would otherwise carry what the earlier measurements left in the heap (go-control-plane runs fresh
    each time)."""
    with tempfile.TemporaryDirectory(prefix="bench-xds-") as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            *("-m", "bench.xds", "--sizes", f"{envoy_count}x{listener_count}", "--paths", path),
            *("--changes", str(changes_for(path, args.changes)), "--debounce-ms", str(args.debounce_ms)),
            *("--log-dir", str(args.log_dir)),
            *(("--profile", str(args.profile)) if args.profile is not None else ()),
            *("--json", str(out)),
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        (result,) = json.loads(out.read_text())
        return Result(**result)


def parse_size(text: str) -> tuple[int, int]:
    """`50x1000`: 50 Envoys of 1000 listeners each."""
    envoys, separator, listeners = text.partition("x")
    if not (separator and envoys.isdigit() and listeners.isdigit() and int(envoys) > 0 and int(listeners) > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: a size is ENVOYSxLISTENERS, two positive integers (50x1000)")
    return int(envoys), int(listeners)


def write_json(path: Path, results: list[Result]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1) + "\n")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        type=parse_size,
        nargs="+",
        default=[(1, 10), (10, 1000), TARGET_AT],
        metavar="ExL",
        help="Envoys x listeners to measure (default 1x10 10x1000 50x1000, the last one the targets')",
    )
    parser.add_argument("--envoys", type=int, nargs="+", help="with --listeners: every pairing, instead of --sizes")
    parser.add_argument("--listeners", type=int, nargs="+", help="with --envoys: every pairing, instead of --sizes")
    parser.add_argument(
        "--changes",
        type=int,
        help=f"changes measured per configuration (default {DELTA_CHANGES} on the delta paths, {SOTW_CHANGES} on SotW)",
    )
    parser.add_argument("--quick", action="store_true", help="1 Envoy, 10 listeners, 5 changes")
    parser.add_argument(
        "--debounce-ms",
        type=float,
        default=0,
        help="tollgate's debounce (the service's default is 50): 0 measures its server as go-control-plane's, "
        "which is fed each change directly",
    )
    parser.add_argument("--log-dir", type=Path, default=Path(".dev/bench-xds"))
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="SVG",
        help="py-spy flame graph of tollgate's server during the changes (one tollgate path and row: each overwrites)",
    )
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=[*PATHS, BASELINE])
    parser.add_argument("--json", type=Path, help="write the results here as JSON, after each measurement")
    args = parser.parse_args()
    if (args.envoys is None) != (args.listeners is None):
        parser.error("--envoys and --listeners go together (every pairing); for chosen pairs use --sizes")
    sizes = args.sizes if args.envoys is None else [(e, n) for e in args.envoys for n in args.listeners]
    if args.quick:
        sizes, args.changes = [(1, 10)], 5
    measurements = [(size, path) for size in sizes for path in args.paths]
    results = []
    for (envoy_count, listener_count), path in measurements:
        if len(measurements) == 1:
            result = await measure_one(path, envoy_count, listener_count, args)
        else:
            result = measure_in_own_process(path, envoy_count, listener_count, args)
        print(
            f"{path:>22}: {envoy_count} Envoys, {listener_count} listeners: p50 {result.p50 * 1000:.0f} ms, "
            f"p99 {result.p99 * 1000:.0f} ms, CPU {result.cpu_per_change * 1000:.1f} ms/change, "
            f"RSS {result.rss_mb:.0f} MB, load {result.load:.1f}",
            flush=True,
        )
        results.append(result)
        if args.json is not None:
            write_json(args.json, results)
    print()
    print(table(results))


if __name__ == "__main__":
    asyncio.run(main())
