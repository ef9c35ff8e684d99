"""The rules of goop.example.com: Goops."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tollgate.testing.objects import Obj
from tollgate.webhook.validation import Limits

Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


def test_the_goop_samples_are_accepted(check: Check, sample: Sample) -> None:
    assert check(sample("Goop")) == []


@pytest.mark.parametrize(
    ("spec", "violation"),
    [
        ({"jobCount": 101}, "spec.jobCount: 101 is above the configured maximum of 100"),
        ({"jobCount": 0}, "spec.jobCount: Input should be greater than or equal to 1 (got 0)"),
        ({"cmd": "  \t"}, "spec.cmd: must not be blank"),
        ({"cmd": ""}, 'spec.cmd: String should have at least 1 character (got "")'),
        (
            {"placement": "PerNode", "jobCount": 3},
            "spec.jobCount: placement PerNode runs one worker per eligible node: jobCount applies to placement Jobs",
        ),
        ({"includeNewNodes": True}, "spec.includeNewNodes: applies to placement PerNode only"),
        ({"placement": "Everywhere"}, "spec.placement: Input should be 'Jobs' or 'PerNode' (got \"Everywhere\")"),
        (
            {"nodeSelector": {"bad key!": "x"}},
            "spec.nodeSelector[bad key!]: 'bad key!' is not a valid label key ([prefix/]name, name at most 63)",
        ),
    ],
)
def test_goop_rules(check: Check, sample: Sample, spec: Obj, violation: str) -> None:
    goop = sample("Goop")
    goop["spec"].update(spec)
    assert check(goop) == [violation]


def test_the_job_count_maximum_is_configured(check: Check, sample: Sample) -> None:
    goop = sample("Goop")
    goop["spec"]["jobCount"] = 300
    assert check(goop, limits=Limits(max_goop_jobs=500)) == []
