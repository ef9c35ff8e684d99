from __future__ import annotations

from tollgate.testing.restarts import CrashLoop


def test_the_delay_doubles_per_crash_in_a_row_up_to_the_cap() -> None:
    loop = CrashLoop(base=1.0, cap=8.0)
    assert [loop.delay(ran=0.5) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_a_long_run_forgets_earlier_crashes() -> None:
    loop = CrashLoop(base=1.0, cap=8.0)
    loop.delay(ran=0.5)
    loop.delay(ran=0.5)
    assert loop.delay(ran=15.9) == 4.0
    assert loop.delay(ran=16.0) == 1.0
