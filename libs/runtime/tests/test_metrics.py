from __future__ import annotations

import prometheus_client
import pytest
from opentelemetry import metrics

from tollgate.runtime.metrics import PROCESS, Declarations
from tollgate.runtime.telemetry import setup_telemetry


def test_declared_names_are_the_names_a_scrape_shows() -> None:
    setup_telemetry("metrics-test")
    declared = Declarations("metricstest")
    counter = declared.counter("things", "Things.", labels=("kind",))
    took = declared.histogram("took", "Time taken.")
    size = declared.counter("sent", "Bytes sent.", unit="By")
    level = declared.gauge("level", "A level.")
    global_meter = metrics.get_meter("metrics-test")
    counter.create(global_meter).add(1, {"kind": "a"})
    took.create(global_meter).record(0.5)
    size.create(global_meter).add(10)
    level.create(global_meter).add(2)
    text = prometheus_client.generate_latest().decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert (counter.exported, took.exported, size.exported, level.exported) == (
        "tollgate_metricstest_things_total",
        "tollgate_metricstest_took_seconds",
        "tollgate_metricstest_sent_bytes_total",
        "tollgate_metricstest_level",
    )
    for metric in (counter, took, size, level):
        assert set(metric.series) <= names, f"{metric.series} not all in {sorted(names)}"
    assert {m.exported for m in PROCESS} <= names
    assert all(name.startswith("tollgate_") for name in names), sorted(
        n for n in names if not n.startswith("tollgate_")
    )


@pytest.mark.parametrize(
    ("name", "unit", "message"),
    [
        ("Things", "", "must be lower snake_case"),
        ("took_seconds", "s", "leave the suffix out"),
        ("things_total", "", "leave the suffix out"),
        ("size", "kB", "unit 'kB' is not one of"),
    ],
)
def test_a_bad_declaration_names_the_metric_and_the_rule(name: str, unit: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Declarations("x").counter(name, "help", unit=unit)


def test_a_name_declared_twice_is_refused() -> None:
    declared = Declarations("x")
    declared.counter("things", "Things.")
    with pytest.raises(ValueError, match="tollgate_x_things is declared twice"):
        declared.gauge("things", "Things again.")
