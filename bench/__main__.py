"""`make bench`: every benchmark in its own process, then one combined table (bench/report.py), printed and
written as Markdown and JSON under `.dev/bench/` (each bench's raw results beside it, as `<name>.json`).

    .venv/bin/python -m bench                   # every bench at its defaults
    .venv/bin/python -m bench --quick           # each bench's --quick (CI smoke)
    .venv/bin/python -m bench --only xds allocator allocator_reads
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import report

# Each: --json, --quick, rows(results).
BENCHES = ("allocator", "allocator_reads", "xds", "routedip", "webhook", "jobs", "memory")


def run(name: str, quick: bool, output: Path) -> list[report.Row] | None:
    """Run bench/<name>.py as its own process (its output passes through) and turn its results into rows; None
    when it failed."""
    raw = output / f"{name}.json"
    raw.unlink(missing_ok=True)
    command = [sys.executable, "-m", f"bench.{name}", "--json", str(raw), *(["--quick"] if quick else [])]
    print(f"== {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    code = subprocess.run(command, check=False).returncode
    print(f"== bench/{name}.py: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    if code != 0 or not raw.exists():
        return None
    module = importlib.import_module(f"bench.{name}")
    rows: list[report.Row] = module.rows(json.loads(raw.read_text()))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="each bench's --quick setting")
    parser.add_argument("--only", nargs="+", choices=BENCHES, default=list(BENCHES))
    parser.add_argument("--output", type=Path, default=report.OUTPUT)
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    rows, failed = [], []
    for name in args.only:
        got = run(name, args.quick, args.output)
        if got is None:
            failed.append(name)
            rows.append(report.Row(f"{name}: the bench failed (its output is above)", "-", "-", None, "-", False))
        else:
            rows += got
    md, js = report.write(rows, args.output)
    print()
    print(report.markdown(rows))
    print(f"written: {md}, {js}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
