"""Restart bookkeeping of a supervised process, with the kubelet's CrashLoopBackOff rule (pure): the embedded
cluster's control-plane watchdog and `make dev` restart what exited after this delay."""

from __future__ import annotations

from dataclasses import dataclass

from tollgate.runtime.backoff import Backoff


@dataclass
class CrashLoop:
    base: float = 1.0
    cap: float = 30.0
    restarts: int = 0
    crashes: int = 0

    def delay(self, ran: float) -> float:
        """Seconds to wait before starting again a process that exited after running `ran` seconds: `base`, doubled
        for each crash in a row, at most `cap`; like the kubelet, earlier crashes are forgotten once a run lasted
        twice the longest delay."""
        if ran >= 2 * self.cap:
            self.crashes = 0
        pause = Backoff(self.base, self.cap, jitter=0).pause(self.crashes)
        self.crashes += 1
        return pause
