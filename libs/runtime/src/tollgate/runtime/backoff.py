"""The one way a retry's pause is computed: exponential, capped, jittered.

Retries that failed together (a conflict between writers, an API server that went away for every
worker at once) must not come back together, so each pause takes a random share off its ceiling.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# 2**64 times any sensible base is past any cap; bounding the exponent keeps the float finite.
_MAX_EXPONENT = 64
_rng = random.Random()


@dataclass(frozen=True)
class Backoff:
    """Pause `base * 2**attempt` seconds, at most `cap`, less a random share of up to `jitter` of it.

    `jitter=1.0` is "full jitter" (anywhere from 0 to the ceiling), `0.0` none (the ceiling itself).
    """

    base: float = 0.005
    cap: float = 0.5
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError(f"Backoff.base: must be greater than 0, got {self.base}")
        if not self.cap >= self.base:
            raise ValueError(f"Backoff.cap: must be at least base ({self.base}), got {self.cap}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"Backoff.jitter: must be between 0 and 1, got {self.jitter}")

    def ceiling(self, attempt: int) -> float:
        """The longest pause before retry number `attempt` (counting from 0)."""
        return min(self.cap, self.base * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT))

    def pause(self, attempt: int, rng: random.Random | None = None) -> float:
        """The pause before retry number `attempt`: within [ceiling * (1 - jitter), ceiling]."""
        ceiling = self.ceiling(attempt)
        return ceiling - (rng or _rng).uniform(0.0, ceiling * self.jitter)
