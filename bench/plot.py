"""The cost curves of docs/benchmarks.md, drawn from the raw results committed under bench/results/.

    .venv/bin/python -m bench.plot          # writes docs/bench-xds-curves.svg and docs/bench-allocator-curves.svg

xds: server CPU per change and convergence p50 of tollgate delta (and go-control-plane delta where it ran at the
same size) over Envoys at 1000 listeners and over listeners at 10 Envoys, from every `xds-*.json` (the files
`python -m bench.xds --json` writes). Allocator: IDs per second and conflicts per ID over K, one line per scheme
and total of IDs, from every `allocator-*.json` (`python -m bench.allocator --json`). matplotlib is a dev
dependency; the SVGs carry no date, so the same results draw the same files.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

RESULTS = Path("bench/results")
DOCS = Path("docs")
XDS_PATHS = ("tollgate delta", "go-control-plane delta")
ENVOY_SWEEP_LISTENERS = 1000
LISTENER_SWEEP_ENVOYS = 10


def load(pattern: str, results: Path) -> list[Any]:
    return [json.loads(path.read_text()) for path in sorted(results.glob(pattern))]


def xds_points(files: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One point per path, Envoys and listeners: of several runs, the one at the lowest load (the least disturbed)."""
    points: dict[tuple[str, int, int], dict[str, Any]] = {}
    for results in files:
        for r in results:
            key = (r["path"], r["envoys"], r["listeners"])
            if key not in points or r["load"] < points[key]["load"]:
                points[key] = r
    return list(points.values())


def sweep(points: list[dict[str, Any]], path: str, fixed: str, value: int, over: str) -> list[dict[str, Any]]:
    return sorted((p for p in points if p["path"] == path and p[fixed] == value), key=lambda p: p[over])


def plot_xds(points: list[dict[str, Any]], svg: Path) -> None:
    figure = Figure(figsize=(11, 8))
    axes = figure.subplots(2, 2)
    sweeps = (
        ("listeners", ENVOY_SWEEP_LISTENERS, "envoys", f"Envoys ({ENVOY_SWEEP_LISTENERS} listeners each)"),
        ("envoys", LISTENER_SWEEP_ENVOYS, "listeners", f"listeners per Envoy ({LISTENER_SWEEP_ENVOYS} Envoys)"),
    )
    for column, (fixed, value, over, label) in enumerate(sweeps):
        for path, marker in zip(XDS_PATHS, ("o-", "s--"), strict=True):
            line = sweep(points, path, fixed, value, over)
            if not line:
                continue
            xs = [p[over] for p in line]
            axes[0][column].plot(xs, [p["cpu_per_change"] * 1000 for p in line], marker, label=path)
            axes[1][column].plot(xs, [p["p50"] * 1000 for p in line], marker, label=f"{path} p50")
            axes[1][column].plot(xs, [p["p99"] * 1000 for p in line], marker, alpha=0.4, label=f"{path} p99")
            for p in line:
                axes[1][column].annotate(f"load {p['load']:.0f}", (p[over], p["p50"] * 1000), fontsize=7)
        axes[0][column].set_ylabel("server CPU per change (ms)")
        axes[1][column].set_ylabel("change to every Envoy ACKing it (ms)")
        axes[1][column].set_yscale("log")
        for row in (0, 1):
            axes[row][column].set_xlabel(label)
            axes[row][column].grid(True, alpha=0.3)
            axes[row][column].legend(fontsize=8)
        if over == "listeners":
            for row in (0, 1):
                axes[row][column].set_xscale("log")
            axes[0][column].set_yscale("log")
    figure.suptitle("xds: one VirtualService (10 listeners) changed; cost of one change (load: 1-minute average)")
    figure.tight_layout()
    figure.savefig(svg, metadata={"Date": None})


def plot_allocator(files: list[dict[str, Any]], svg: Path) -> None:
    lines: dict[tuple[str, int], list[tuple[int, float, float]]] = defaultdict(list)
    for results in files:
        for r in results["rows"]:
            per_allocator = r["ids"] // r["allocators"]
            total = per_allocator * r["allocators"]
            lines[(r["scheme"], round(total, -2))].append(
                (r["allocators"], r["ids"] / r["seconds"], r["conflicts"] / r["ids"])
            )
    figure = Figure(figsize=(11, 4.5))
    rate, conflicts = figure.subplots(1, 2)
    for (scheme, total), points in sorted(lines.items()):
        points.sort()
        ks = [k for k, _, _ in points]
        style = "o-" if scheme == "block" else "s--"
        rate.plot(ks, [r for _, r, _ in points], style, label=f"{scheme}, {total:,} IDs in all")
        conflicts.plot(ks, [c for _, _, c in points], style, label=f"{scheme}, {total:,} IDs in all")
    rate.set_ylabel("IDs per second (all allocators)")
    rate.set_yscale("log")
    conflicts.set_ylabel("conflicts per ID")
    for axis in (rate, conflicts):
        axis.set_xlabel("allocators (K)")
        axis.set_xticks([1, 2, 4, 8])
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle("allocator: K allocators sharing out a total of IDs (block: 64 IDs per write)")
    figure.tight_layout()
    figure.savefig(svg, metadata={"Date": None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args()
    matplotlib.rcParams["svg.hashsalt"] = "tollgate"
    plot_xds(xds_points(load("xds-*.json", args.results)), args.docs / "bench-xds-curves.svg")
    plot_allocator(load("allocator-*.json", args.results), args.docs / "bench-allocator-curves.svg")
    print(f"written: {args.docs / 'bench-xds-curves.svg'}, {args.docs / 'bench-allocator-curves.svg'}")


if __name__ == "__main__":
    main()
