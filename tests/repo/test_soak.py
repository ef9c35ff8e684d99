"""The soak's pure parts (bench/soak.py): its timings, which samples its memory figures compare, which fault comes
next, what it counts as leaked, and its table. The soak itself runs with `make soak`, not here."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench.soak import Fault, Plan, Row, Sample, markdown, memory_row, next_fault, orphans, stuck


async def nothing() -> None:
    return None


ROTATION = [
    Fault("SIGKILL of xds", nothing, "xds"),
    Fault("SIGKILL of jobs", nothing, "jobs"),
    Fault("freeze", nothing),
]


@pytest.mark.parametrize(
    ("minutes", "quiet", "churn", "warm_up", "faults_every"),
    [(30, 180, 1620, 300, 180), (3, 30, 150, 50, 37.5), (10, 60, 540, 180, 135)],
)
def test_the_run_is_churn_then_a_quiet_period_with_a_warm_up_of_5_minutes_or_a_third_of_the_churn(
    minutes: float, quiet: float, churn: float, warm_up: float, faults_every: float
) -> None:
    plan = Plan(minutes, pace=10, fault_every=None)
    assert (plan.quiet, plan.churn, plan.warm_up, plan.fault_interval) == (quiet, churn, warm_up, faults_every)
    assert Plan(minutes, pace=10, fault_every=60).fault_interval == 60


def test_growth_is_measured_from_the_warm_up_to_the_end() -> None:
    samples = [Sample(at, 7, rss, 20, 10) for at, rss in ((0, 50.0), (300, 100.0), (600, 105.0), (1800, 109.0))]
    row = memory_row("xds", samples, restarted=0, warm_up=300)
    assert row.met is True
    assert row.measured.startswith("RSS 100.0 at 5:00 -> 109.0 at 30:00 (+9.0%)")
    assert memory_row("xds", [*samples, Sample(1805, 7, 110.0, 20, 10)], 0, 300).met is False


def test_a_restarted_service_is_measured_from_a_warm_up_after_its_restart() -> None:
    before = [Sample(at, 7, 200.0, 20, 10) for at in (300, 500)]
    after = [Sample(at, 8, rss, 20, 10) for at, rss in ((620, 50.0), (900, 90.0), (1800, 95.0))]
    row = memory_row("jobs", before + after, restarted=600, warm_up=300)
    assert (row.met, "RSS 90.0 at 15:00" in row.measured, "process since 10:00" in row.measured) == (True, True, True)
    late = memory_row("jobs", [*before, Sample(1790, 8, 50.0, 20, 10), Sample(1800, 8, 51.0, 20, 10)], 1780, 300)
    assert (late.met, late.measured.startswith("not measured")) == (False, True)


def test_a_sigkill_comes_only_while_a_warm_up_of_churn_remains() -> None:
    assert next_fault(ROTATION, 0, remaining=600, warm_up=300) == (ROTATION[0], 1)
    assert next_fault(ROTATION, 1, remaining=200, warm_up=300) == (ROTATION[2], 3)
    assert next_fault(ROTATION, 3, remaining=200, warm_up=300) == (ROTATION[2], 6)


def meta(name: str, labels: dict[str, str]) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels))


def test_leaks_are_objects_whose_owner_is_gone_and_objects_held_by_a_finalizer() -> None:
    label = "epic.acnodal.io/load-balancer"
    deployments = [meta("lb-envoy", {label: "lb"}), meta("soak-3-envoy", {label: "soak-3"})]
    assert orphans(deployments, label, {"lb"}) == ["soak-3-envoy"]
    deleting = {"kind": "RoutedIP", "metadata": {"name": "r", "deletionTimestamp": "t", "finalizers": ["a/b"]}}
    assert stuck([deleting, {"kind": "RoutedIP", "metadata": {"name": "s"}}]) == ["RoutedIP r (a/b)"]


def test_the_table_says_met_and_not_met_and_escapes_pipes() -> None:
    table = markdown([Row("a | b", "1"), Row("leaked", "x", "none", False), Row("lost", "none", "none", True)])
    assert table.splitlines()[2:] == ["| a \\| b | 1 | - | - |", "| leaked | x | none | NOT met |",
                                      "| lost | none | none | met |"]  # fmt: skip
