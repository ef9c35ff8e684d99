"""Benchmark of tunnel-ID allocation against a real API server: K concurrent allocators (K = 1, 4, 8) each
allocating N IDs from the EPIC singleton, with the seed's algorithm (one conditional replace per ID) and with
blocks (one conditional replace per block of IDs), in the same run on the same cluster.

    .venv/bin/python -m bench.allocator                       # K = 1 4 8, N = 100, on a fresh embedded cluster
    .venv/bin/python -m bench.allocator --ids 50 --kubeconfig .dev/kubeconfig
    .venv/bin/python -m bench.allocator --quick               # K = 1 4, N = 10: CI smoke, well under two minutes
    .venv/bin/python -m bench.allocator --allocators 1 2 4 8 --total-ids 100 1000 10000 --json out.json  # curves

Prints one table: IDs/second, conflicts and retries per ID, duplicates (must be 0) and the ratio of each scheme
to the seed's at the same K, plus the raw rate of plain replace calls on one object (the physical ceiling of
the seed's algorithm, which needs one such call per ID). Each allocator has its own API client, as separate
allocator processes would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report
from tollgate.allocator import allocation
from tollgate.allocator.k8s import Kube
from tollgate.allocator.tunnels import BlockTunnelIDs, EpicSingleton, Metrics, SeedTunnelIDs, TunnelIDs
from tollgate.models.epic import EPIC, SINGLETON_NAME, SYSTEM_NAMESPACE, EPICSpec
from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import EmbeddedCluster


@dataclass
class Row:
    scheme: str
    allocators: int
    ids: int
    seconds: float
    conflicts: int
    retries: int
    writes: int
    duplicates: int
    load: float  # the machine's 1-minute load average when the run ended (other work shares the machine)

    @property
    def rate(self) -> float:
        return self.ids / self.seconds


def kube(kubeconfig: Path | None) -> Kube:
    return Kube(api_client(kubeconfig, pool_size=8))


async def run_scheme(scheme: str, allocators: int, ids: int, block: int, kubeconfig: Path | None) -> Row:
    sources: list[TunnelIDs] = []
    for index in range(allocators):
        api = kube(kubeconfig)
        epic = EpicSingleton(api, EPICSpec())
        metrics = Metrics()
        if scheme == "seed":
            sources.append(SeedTunnelIDs(epic, metrics))
        else:
            owner = f"bench-{scheme}-{allocators}-{index}"
            sources.append(BlockTunnelIDs(api, epic, metrics, owner, size=block, track_owners=False))
    handed: list[int] = []

    async def allocate(source: TunnelIDs) -> None:
        for _ in range(ids):
            handed.append(await source.allocate())

    started = time.perf_counter()
    await asyncio.gather(*(allocate(source) for source in sources))
    seconds = time.perf_counter() - started
    stats = [source.metrics.stats for source in sources]
    return Row(
        scheme=scheme,
        allocators=allocators,
        ids=len(handed),
        seconds=seconds,
        conflicts=sum(s.conflicts for s in stats),
        retries=sum(s.retries for s in stats),
        writes=sum(s.writes for s in stats),
        duplicates=sum(n - 1 for n in allocation.duplicates(handed).values()),
        load=os.getloadavg()[0],
    )


async def replace_ceiling(calls: int, kubeconfig: Path | None) -> float:
    """Plain replace calls on the singleton's status, each carrying the resourceVersion the last one returned."""
    api = kube(kubeconfig)
    obj = await api.get(EPIC, SYSTEM_NAMESPACE, SINGLETON_NAME)
    assert obj is not None
    started = time.perf_counter()
    for _ in range(calls):
        obj = await api.replace_status(EPIC, obj)
    return calls / (time.perf_counter() - started)


@contextlib.contextmanager
def cluster(kubeconfig: Path | None) -> Iterator[Path | None]:
    if kubeconfig is not None:
        yield kubeconfig
        return
    with tempfile.TemporaryDirectory(prefix="allocator-bench-") as tmp:
        embedded = EmbeddedCluster("allocator-bench", Path(tmp) / "kwok", Path(tmp) / "kubeconfig")
        try:
            embedded.up(1)
            embedded.install_crds()
            yield embedded.kubeconfig
        finally:
            embedded.down()


def times(rate: float, seed: float | None) -> str:
    return "-" if seed is None else f"{rate / seed:.1f}x"


def render(rows: list[Row], ceiling: float, block: int) -> str:
    seed = {(row.allocators, row.ids): row.rate for row in rows if row.scheme == "seed"}
    lines = [
        "| scheme | K | IDs | IDs/s | writes | conflicts/ID | retries/ID | duplicates | vs seed at K |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        name = "seed (1 replace per ID)" if row.scheme == "seed" else f"block ({block} IDs per replace)"
        versus = times(row.rate, seed.get((row.allocators, row.ids)))
        lines.append(
            f"| {name} | {row.allocators} | {row.ids} | {row.rate:,.0f} | {row.writes} | {row.conflicts / row.ids:.2f} "
            f"| {row.retries / row.ids:.2f} | {row.duplicates} | {versus} |"
        )
    lines.append(
        f"| plain replace on one object (ceiling of seed) | 1 | - | {ceiling:,.0f} | - | - | - | - | "
        f"{times(ceiling, seed[min(seed)] if seed else None)} |"
    )
    return "\n".join(lines)


def per_allocator(args: argparse.Namespace, allocators: int) -> list[int]:
    """N for each run at K allocators: --ids, or each --total-ids shared out among the K."""
    if args.total_ids:
        return [max(1, total // allocators) for total in args.total_ids]
    return [args.ids]


async def main_async(args: argparse.Namespace) -> None:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(64))
    with cluster(args.kubeconfig) as kubeconfig:
        await EpicSingleton(kube(kubeconfig), EPICSpec()).ensure()
        ceiling = await replace_ceiling(args.ceiling_calls, kubeconfig)
        rows = []
        for allocators in args.allocators:
            for ids in per_allocator(args, allocators):
                for scheme in args.schemes:
                    row = await run_scheme(scheme, allocators, ids, args.block_size, kubeconfig)
                    print(
                        f"{scheme:>5}: K = {allocators}, {row.ids} IDs: {row.rate:,.0f} IDs/s, "
                        f"{row.conflicts / row.ids:.2f} conflicts/ID, load {row.load:.1f}",
                        flush=True,
                    )
                    rows.append(row)
                    if args.json is not None:
                        write_json(args.json, rows, ceiling, args.block_size)
        print(f"\nBlock size {args.block_size}\n")
        print(render(rows, ceiling, args.block_size))
        assert all(row.duplicates == 0 for row in rows), "an ID was handed out twice"


def write_json(path: Path, rows: list[Row], ceiling: float, block: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"ceiling": ceiling, "block_size": block, "rows": [dataclasses.asdict(row) for row in rows]}
    path.write_text(json.dumps(body, indent=1) + "\n")


TARGET_K = (4, 8)
TARGET_RATIO = 5.0


def rows(results: dict[str, Any]) -> list[report.Row]:
    """The combined table's rows (bench/report.py): the block scheme's rate against the seed's at each K and N."""
    runs = [Row(**row) for row in results["rows"]]
    seed = {(row.allocators, row.ids): row.rate for row in runs if row.scheme == "seed"}
    out = []
    for row in runs:
        peer = seed.get((row.allocators, row.ids))
        if row.scheme != "block" or peer is None:
            continue
        ratio = report.ratio(row.rate, peer)
        targeted = row.allocators in TARGET_K and ratio is not None
        out.append(
            report.Row(
                what=f"allocator: IDs/s, K = {row.allocators}, {row.ids} IDs, block {results['block_size']} vs seed",
                tollgate=f"{row.rate:,.0f} IDs/s",
                peer=f"{peer:,.0f} IDs/s",
                ratio=ratio,
                target=f">= {TARGET_RATIO:.0f}x at K = 4 and 8" if row.allocators in TARGET_K else "-",
                met=(ratio is not None and ratio >= TARGET_RATIO) if targeted else None,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster instead of a fresh embedded one")
    parser.add_argument("--allocators", type=int, nargs="+", default=[1, 4, 8], help="values of K")
    parser.add_argument("--ids", type=int, default=100, help="N, the IDs each allocator allocates")
    parser.add_argument(
        "--total-ids", type=int, nargs="+", help="instead of --ids: runs handing out these many IDs in all (N = T / K)"
    )
    parser.add_argument("--schemes", nargs="+", default=["seed", "block"], choices=["seed", "block"])
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--ceiling-calls", type=int, default=200)
    parser.add_argument("--json", type=Path, help="write the results here as JSON, after each run")
    parser.add_argument("--quick", action="store_true", help="K = 1 and 4, N = 10, 20 ceiling calls: CI smoke")
    args = parser.parse_args()
    if args.quick:
        args.allocators, args.ids, args.total_ids, args.ceiling_calls = [1, 4], 10, None, 20
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
