from __future__ import annotations

from pathlib import Path

from tollgate.testing.dev.supervisor import rotate_logs


def test_each_run_keeps_one_previous_log_per_service_and_drops_per_pid_logs(tmp_path: Path) -> None:
    (tmp_path / "jobs.log").write_text("run 2\n")
    (tmp_path / "jobs.log.1").write_text("run 1\n")
    (tmp_path / "jobs-4242-139870.log").write_text("an old per-pid log\n")
    (tmp_path / "jobs-notes.log").write_text("not ours\n")
    rotate_logs(tmp_path, ["jobs", "xds"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs-notes.log", "jobs.log.1"]
    assert (tmp_path / "jobs.log.1").read_text() == "run 2\n"
