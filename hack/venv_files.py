"""Checks that every installed package's files are still its own (`make sync` runs it after `uv sync`).

Two wheels can ship the same file: xds-protos carries its own copy of the OTLP protos (opentelemetry/proto/...),
which opentelemetry-proto also installs. Whichever is installed last overwrites the other's files, and uninstalling
one removes files the other still needs (`uv sync` after dagger-io left the dev group did exactly that).

    python hack/venv_files.py [--path SITE_DIR ...]

Prints nothing and exits 0 when every file is in place. Exits 1, printing on stdout the names of the packages to
reinstall (one a line), when a package's file is missing or is no installed package's version; what is wrong goes
to stderr.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Claim:
    package: str
    file: str
    path: Path
    hash: str
    size: int | None


def claims(distributions: Iterable[metadata.Distribution]) -> list[Claim]:
    """Every file a RECORD lists with a hash (RECORD itself and .pyc files have none)."""
    found = []
    for dist in distributions:
        name = dist.metadata["Name"]
        for file in dist.files or ():
            if file.hash is None or file.hash.mode != "sha256":
                continue
            found.append(Claim(name, str(file), Path(str(file.locate())), file.hash.value, file.size))
    return found


def _sha256(path: Path) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def _intact(owners: list[Claim]) -> bool:
    """Present with a recorded size; where packages disagree on a file's contents, the one on disk is one of them
    (last installed wins, as pip and uv do)."""
    try:
        size = owners[0].path.stat().st_size
    except FileNotFoundError:
        return False
    if size not in {owner.size for owner in owners} and None not in {owner.size for owner in owners}:
        return False
    return len({owner.hash for owner in owners}) == 1 or _sha256(owners[0].path) in {owner.hash for owner in owners}


def check(distributions: Iterable[metadata.Distribution]) -> dict[str, list[str]]:
    """Package -> its files that are missing or are nobody's."""
    by_path: dict[Path, list[Claim]] = defaultdict(list)
    for claim in claims(distributions):
        by_path[claim.path].append(claim)
    broken: dict[str, list[str]] = defaultdict(list)
    for owners in by_path.values():
        if not _intact(owners):
            for owner in owners:
                broken[owner.package].append(owner.file)
    return dict(broken)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", action="append", help="a site-packages directory (default: this interpreter's)")
    args = parser.parse_args(argv)
    broken = check(metadata.distributions(path=args.path or sys.path))
    for package, files in sorted(broken.items()):
        print(f"venv: {package}: {len(files)} files missing or changed since it was installed (first: {files[0]})",
              file=sys.stderr)  # fmt: skip
        print(package)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
