"""The Tiltfile, run by Tilt itself: `tilt ci` in local mode brings the whole system up and proves the data path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tollgate.testing.cluster import dev_cluster
from tollgate.testing.tilt import tilt_binary, tilt_ci
from tollgate.testing.tools import ToolsMissingError, repo_root

try:
    TILT = tilt_binary()
except ToolsMissingError as missing:
    pytest.skip(f"Tilt tests skipped: {missing}", allow_module_level=True)


@pytest.fixture
def dev_dir(tmp_path: Path) -> Iterator[Path]:
    """A state directory of its own; whatever cluster Tilt started there is deleted afterwards."""
    state = tmp_path / "dev"
    yield state
    dev_cluster(repo_root(), state).down()


def test_tilt_ci_local_mode_runs_every_resource_and_carries_traffic(dev_dir: Path) -> None:
    result = tilt_ci(dev_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "SUCCESS. All workloads are healthy." in output, output[-8000:]
    # data-path is the last resource: it runs after every service is Ready, so its echoes prove them all.
    assert "'udp-echo:datagram from make dev'" in output, output[-8000:]
    assert "'tcp-echo:stream from make dev'" in output, output[-8000:]
