"""Write the files generated from one source elsewhere in the repo.

- crds/*.yaml                 -> deploy/charts/tollgate-crds/files/   (the CRDs chart embeds them)
- services/<name>/rbac.yaml   -> deploy/charts/tollgate-<name>/files/rbac.yaml
- hack/Dockerfile.in          -> services/<name>/Dockerfile           (one image recipe, one file per service)

`--check` reports drift instead (make lint runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ROOT / "deploy" / "charts"


def wanted() -> dict[Path, str]:
    files = {
        CHARTS / "tollgate-crds" / "files" / crd.name: crd.read_text() for crd in sorted((ROOT / "crds").glob("*.yaml"))
    }
    for rbac in sorted((ROOT / "services").glob("*/rbac.yaml")):
        files[CHARTS / f"tollgate-{rbac.parent.name}" / "files" / "rbac.yaml"] = rbac.read_text()
    template = (ROOT / "hack" / "Dockerfile.in").read_text()
    for service in sorted(p.parent.name for p in (ROOT / "services").glob("*/pyproject.toml")):
        files[ROOT / "services" / service / "Dockerfile"] = template.replace("{service}", service)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    files = wanted()
    stale = {p for p in (CHARTS / "tollgate-crds" / "files").glob("*.yaml") if p not in files}
    changed = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for path in sorted(changed) + sorted(stale):
            print(f"{path.relative_to(ROOT)}: out of date; run `make manifests`", file=sys.stderr)
        return 1 if changed or stale else 0
    for path in stale:
        path.unlink()
    for path in changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
    return 0


if __name__ == "__main__":
    sys.exit(main())
