"""The files `make manifests` writes are up to date, and a stale metrics table in docs/operations.md is caught."""

from __future__ import annotations

import subprocess
import sys

from tollgate.testing.tools import hack_script, repo_root

ROOT = repo_root()


def test_generated_files_are_up_to_date() -> None:
    check = subprocess.run(
        [sys.executable, "hack/generated_files.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr


def test_the_metrics_table_lists_every_declared_metric_and_a_stale_one_is_rewritten() -> None:
    from tollgate.xds.metrics import NACKS

    module = hack_script("generated_files")
    document = (ROOT / "docs" / "operations.md").read_text()
    assert f"| `{NACKS.exported}` | counter | 1 | `type`, `api` | {NACKS.help} |" in document
    stale = document.replace(f"`{NACKS.exported}`", "`xds_nacks_total`")
    assert module.with_metrics_table(stale) == document
