"""The retry pause: growth, cap, jitter bounds, and refusal of settings that make no sense."""

from __future__ import annotations

import random

import pytest

from tollgate.runtime.backoff import Backoff


def test_the_ceiling_doubles_from_base_up_to_cap() -> None:
    backoff = Backoff(base=0.5, cap=4.0, jitter=0.0)
    assert [backoff.pause(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_huge_attempt_number_stays_at_the_cap() -> None:
    assert Backoff(base=0.5, cap=4.0).ceiling(10_000) == 4.0


@pytest.mark.parametrize("jitter", [0.25, 0.5, 1.0])
def test_jitter_takes_at_most_its_share_off_the_ceiling(jitter: float) -> None:
    backoff = Backoff(base=1.0, cap=8.0, jitter=jitter)
    rng = random.Random(7)
    for attempt in range(6):
        ceiling = backoff.ceiling(attempt)
        pauses = [backoff.pause(attempt, rng) for _ in range(200)]
        assert all(ceiling * (1 - jitter) <= p <= ceiling for p in pauses), (attempt, min(pauses), max(pauses))
        assert len(set(pauses)) > 100, "the pauses are spread, not one value"
        spread = max(pauses) - min(pauses)
        assert spread > ceiling * jitter * 0.8, "the whole share is used"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"base": 0.0}, "Backoff.base: must be greater than 0"),
        ({"base": 1.0, "cap": 0.5}, "Backoff.cap: must be at least base"),
        ({"jitter": 1.5}, "Backoff.jitter: must be between 0 and 1"),
        ({"jitter": -0.1}, "Backoff.jitter: must be between 0 and 1"),
    ],
)
def test_nonsense_settings_are_refused_naming_the_field(settings: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Backoff(**settings)
