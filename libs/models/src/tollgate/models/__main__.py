"""`python -m tollgate.models DIR`: write one CRD per kind into DIR (`--check`: fail if DIR differs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tollgate.models import ALL_KINDS
from tollgate.models.crd import file_name, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tollgate.models", description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    wanted = {file_name(model): render(model) for model in ALL_KINDS}
    directory: Path = args.directory
    present = {path.name for path in directory.glob("*.yaml")} if directory.exists() else set()
    stale = sorted(present - wanted.keys())
    changed = sorted(
        n for n, text in wanted.items() if not (directory / n).exists() or (directory / n).read_text() != text
    )
    if args.check:
        for name in changed + stale:
            print(f"{directory / name}: out of date; run `make manifests`", file=sys.stderr)
        return 1 if changed or stale else 0
    directory.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (directory / name).unlink()
    for name in changed:
        (directory / name).write_text(wanted[name])
    print(f"{len(wanted)} CRDs in {directory} ({len(changed)} written, {len(stale)} removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
