"""The combined benchmark table: one `Row` per result, written as Markdown and JSON under `.dev/bench/`.

How a benchmark joins `make bench` (`python -m bench`, see bench/__main__.py):

- `python -m bench.<name> --json PATH` writes the bench's raw results to PATH as JSON (any shape the bench
  chooses), and `--quick` makes the bench finish in under two minutes (CI smoke);
- the module has `rows(results) -> list[Row]`, which turns those results, read back with `json.load`, into
  rows of the combined table (pure: no I/O, no cluster);
- its name is added to `BENCHES` in bench/__main__.py.

The runner starts each bench as its own process (each starts its own cluster or servers), then imports the
module for `rows`. A Row says what was measured, tollgate's figure and the peer's (the baseline the same run
measured) as text with units, the ratio tollgate / peer, the target, and whether it was met (None: no target).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

OUTPUT = Path(".dev/bench")
COLUMNS = ("what", "tollgate", "peer", "ratio", "target", "met")


@dataclass(frozen=True)
class Row:
    what: str
    tollgate: str
    peer: str
    ratio: float | None
    target: str
    met: bool | None


def ratio(tollgate: float, peer: float) -> float | None:
    """tollgate / peer, or None when the peer's figure is zero."""
    return tollgate / peer if peer else None


def cell(row: Row, column: str) -> str:
    if column == "ratio":
        return "-" if row.ratio is None else f"{row.ratio:.2f}x"
    if column == "met":
        return {None: "-", True: "met", False: "NOT met"}[row.met]
    text = str(getattr(row, column))
    return text.replace("|", "\\|") or "-"


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "| --- | --- | --- | ---: | --- | --- |"]
    lines += ["| " + " | ".join(cell(row, column) for column in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def to_json(rows: Sequence[Row]) -> str:
    return json.dumps([dataclasses.asdict(row) for row in rows], indent=1) + "\n"


def write(rows: Sequence[Row], directory: Path = OUTPUT, name: str = "bench") -> tuple[Path, Path]:
    """`<directory>/<name>.md` and `<name>.json`, the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    md, js = directory / f"{name}.md", directory / f"{name}.json"
    md.write_text(markdown(rows))
    js.write_text(to_json(rows))
    return md, js
