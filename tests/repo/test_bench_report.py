"""The combined benchmark table (bench/report.py): each bench's results turned into rows with its targets judged,
and the Markdown and JSON `make bench` writes. The benches themselves are not run here (make test's budget)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bench import allocator, allocator_reads, jobs, memory, report, routedip, webhook, xds


def xds_result(path: str, p99: float, cpu: float, rss: float, envoys: int = 50, changes: int = 0) -> dict[str, Any]:
    return {
        "path": path,
        "envoys": envoys,
        "listeners": 1000,
        "initial_sync": 60.0,
        "p50": p99 / 2,
        "p99": p99,
        "cpu_per_change": cpu,
        "rss_mb": rss,
        "load": 3.0,
        "changes": changes,
    }


def test_xds_rows_judge_the_targets_at_50_x_1000() -> None:
    rows = xds.rows(
        [
            xds_result("tollgate delta", p99=0.315, cpu=0.150, rss=147, changes=100),
            xds_result("go-control-plane delta", p99=0.416, cpu=0.050, rss=267, changes=100),
            xds_result("tollgate SotW", p99=10.0, cpu=0.35, rss=200),
            xds_result("go-control-plane SotW", p99=14.0, cpu=0.5, rss=280),
        ]
    )
    by_what = {row.what: row for row in rows}
    p99 = by_what["xds 50 x 1000: delta p99 of 100 changes, change to every Envoy ACKing it"]
    assert (p99.tollgate, p99.met, round(p99.ratio or 0, 2)) == ("315 ms", True, 0.76)
    cpu = by_what["xds 50 x 1000: delta server CPU per change"]
    assert (cpu.met, round(cpu.ratio or 0, 1), cpu.target) == (False, 3.0, "<= 2.0x at 50 x 1000")
    assert by_what["xds 50 x 1000: delta server RSS"].met is True
    assert by_what["xds 50 x 1000: SotW p99, change to every Envoy ACKing it"].met is None


def test_xds_rows_judge_the_targets_at_50_x_1000_only() -> None:
    rows = xds.rows(
        [
            xds_result("tollgate delta", p99=0.1, cpu=0.01, rss=300, envoys=10),
            xds_result("go-control-plane delta", p99=0.1, cpu=0.01, rss=100, envoys=10),
        ]
    )
    assert [round(row.ratio or 0, 1) for row in rows] == [1.0, 1.0, 3.0]
    assert [row.met for row in rows] == [None, None, None]


def test_allocator_rows_compare_block_with_seed_at_the_same_k_and_ids() -> None:
    def run(scheme: str, k: int, seconds: float) -> dict[str, Any]:
        return dict(scheme=scheme, allocators=k, ids=100 * k, seconds=seconds, conflicts=0, retries=0, writes=1)

    results = {
        "ceiling": 100.0,
        "block_size": 64,
        "rows": [
            {**run("seed", 1, 2.0), "duplicates": 0, "load": 1.0},
            {**run("block", 1, 0.1), "duplicates": 0, "load": 1.0},
            {**run("seed", 4, 10.0), "duplicates": 0, "load": 1.0},
            {**run("block", 4, 4.0), "duplicates": 0, "load": 1.0},
        ],
    }
    rows = allocator.rows(results)
    assert [(row.tollgate, row.peer, row.met) for row in rows] == [
        ("1,000 IDs/s", "50 IDs/s", None),
        ("100 IDs/s", "40 IDs/s", False),
    ]
    assert rows[1].target == ">= 5x at K = 4 and 8"


def test_routedip_rows_judge_each_failover_p99_against_two_seconds() -> None:
    results = {
        "many": 3,
        "one": {"watch": [0.01, 0.02], "each": [0.05, 0.09], "all": [0.09]},
        "many_samples": {"watch": [0.02], "each": [0.5, 2.5, 0.7], "all": [2.5]},
        "load": 2.0,
    }
    rows = routedip.rows(results)
    assert [row.met for row in rows] == [True, False, False]
    assert rows[0].peer == "20 ms (one write seen on a watch)"


def test_jobs_rows_judge_the_ratio_at_100_x_5_only() -> None:
    rows = jobs.rows(
        [
            {"goops": 1, "jobs": 5, "direct_s": 1.0, "goop_s": 1.6, "cpu_s": 0.15},
            {"goops": 100, "jobs": 500, "direct_s": 40.0, "goop_s": 50.0, "cpu_s": 9.0},
            {"goops": 100, "jobs": 500, "direct_s": 40.0, "goop_s": 54.0, "cpu_s": 9.5},
        ]
    )
    assert [(row.met, round(row.ratio or 0, 2)) for row in rows] == [(None, 1.6), (True, 1.25), (False, 1.35)]
    assert [row.what for row in rows[1:]] == [
        "jobs: 100 Goops x 5 Jobs to all Completed, run 1 (controller CPU 90 ms per Goop)",
        "jobs: 100 Goops x 5 Jobs to all Completed, run 2 (controller CPU 95 ms per Goop)",
    ]
    slower = jobs.rows([{"goops": 100, "jobs": 500, "direct_s": 40.0, "goop_s": 60.0, "cpu_s": 9.0}])
    assert slower[0].met is False


def test_webhook_rows_are_its_targets_against_the_go_floor() -> None:
    targets = [
        webhook.Target("Goop", "webhook CPU per review (ms)", floor=0.6, tollgate=1.2, limit=1.5),
        webhook.Target("Goop", "added p50, 50 clients paced at 100/s (ms)", floor=2.0, tollgate=2.8, limit=1.5),
        webhook.Target("Goop", "added p50, 50 clients paced at 100/s (ms)", floor=-0.1, tollgate=2.8, limit=1.5),
    ]
    rows = webhook.rows([dataclasses.asdict(target) for target in targets])
    assert [(row.what, row.tollgate, row.met) for row in rows] == [
        ("webhook: Goop, webhook CPU per review", "1.20 ms", False),
        ("webhook: Goop, added p50, 50 clients paced at 100/s", "2.80 ms", True),
        ("webhook: Goop, added p50, 50 clients paced at 100/s", "2.80 ms", False),
    ]
    assert rows[2].ratio is None, "a floor within the noise of the baseline gives no ratio"


def test_memory_rows_judge_each_services_peak_against_120_mb() -> None:
    measured = [
        memory.Measurement("routedip", "1000 RoutedIPs", 1000, 76.0, 111.0, 110.0, 548.0),
        memory.Measurement("jobs", "1000 Goops (1 Job each)", 1000, 85.0, 158.0, 158.0, 515.0),
        memory.Measurement("xds", "1000 VirtualServices", 1000, 80.0, 110.0, 110.0, 900.0, finished=False),
    ]
    rows = memory.rows([dataclasses.asdict(found) for found in measured])
    assert [(row.what, row.tollgate, row.met) for row in rows] == [
        ("memory: routedip with 1000 RoutedIPs", "111 MB peak", True),
        ("memory: jobs with 1000 Goops (1 Job each)", "158 MB peak", False),
        ("memory: xds with 1000 VirtualServices (processed not all within 900 s)", "110 MB peak", False),
    ]


def test_allocator_reads_rows_judge_each_later_batch_against_the_first() -> None:
    batches = [
        allocator_reads.Batch(5, 5, {"loadbalancers": 200_000.0, "remoteendpoints": 300_000.0}, 20.0, 1.0),
        allocator_reads.Batch(25, 5, {"loadbalancers": 250_000.0, "remoteendpoints": 350_000.0}, 60.0, 2.0),
        allocator_reads.Batch(100, 5, {"loadbalancers": 500_000.0, "remoteendpoints": 300_000.0}, 200.0, 3.0),
    ]
    rows = allocator_reads.rows([dataclasses.asdict(batch) for batch in batches])
    assert [(row.what, row.tollgate, row.peer, round(row.ratio or 0, 2), row.met) for row in rows] == [
        (
            "allocator: bytes listed per load balancer of 5 added, 25 in the namespace",
            "120.0 KB",
            "100.0 KB (itself, 5 in the namespace)",
            1.2,
            True,
        ),
        (
            "allocator: bytes listed per load balancer of 5 added, 100 in the namespace",
            "160.0 KB",
            "100.0 KB (itself, 5 in the namespace)",
            1.6,
            False,
        ),
    ]
    assert allocator_reads.rows([]) == []


def test_xds_sizes_are_envoys_by_listeners_and_bad_ones_name_the_form() -> None:
    assert xds.parse_size("50x1000") == (50, 1000)
    for bad in ("50", "x1000", "0x10", "5x-1", "fivex10"):
        with pytest.raises(argparse.ArgumentTypeError, match="ENVOYSxLISTENERS"):
            xds.parse_size(bad)


def test_xds_delta_paths_measure_enough_changes_for_a_p99_unless_told() -> None:
    assert [xds.changes_for(path, None) for path in xds.PATHS] == [100, 15, 15, 100]
    assert {xds.changes_for(path, 5) for path in xds.PATHS} == {5}


def test_write_gives_a_markdown_table_and_json_with_the_same_rows(tmp_path: Path) -> None:
    rows = [
        report.Row("xds: delta p99", "315 ms", "416 ms", 0.757, "<= 1.2x", True),
        report.Row("allocator: IDs/s", "100 IDs/s", "40 IDs/s", 2.5, ">= 5x", False),
        report.Row("jobs: skipped", "-", "-", None, "-", None),
    ]
    md, js = report.write(rows, tmp_path / "bench")
    assert md.read_text().splitlines() == [
        "| what | tollgate | peer | ratio | target | met |",
        "| --- | --- | --- | ---: | --- | --- |",
        "| xds: delta p99 | 315 ms | 416 ms | 0.76x | <= 1.2x | met |",
        "| allocator: IDs/s | 100 IDs/s | 40 IDs/s | 2.50x | >= 5x | NOT met |",
        "| jobs: skipped | - | - | - | - | - |",
    ]
    assert [report.Row(**row) for row in json.loads(js.read_text())] == rows
