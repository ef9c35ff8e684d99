"""What `make dev` says while it works, and how `make dev-up` follows it in the detached system's log."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO, TypeVar

from tollgate.testing.wait import wait_for

T = TypeVar("T")


class Progress:
    """What `make dev` says: every line prefixed with the seconds since it started and, while a wait lasts, a line
    every `tick` seconds naming what it is still waiting for."""

    PREFIX = re.compile(r"^\[ *\d+\.\d s\] ")

    def __init__(self, tick: float | None = None, out: TextIO | None = None) -> None:
        self.tick = tick if tick is not None else float(os.environ.get("TOLLGATE_DEV_TICK", "10"))
        self.out = out
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        prefix = f"[{time.monotonic() - self.started:6.1f} s] "
        with self._lock:
            print("\n".join(prefix + line for line in text.splitlines()), file=self.out or sys.stdout, flush=True)

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Inside: `still waiting for <what> (N s)` every `tick` seconds."""
        started = time.monotonic()
        done = threading.Event()

        def remind() -> None:
            while not done.wait(self.tick):
                self.say(f"still waiting for {what} ({time.monotonic() - started:.0f} s)")

        reminder = threading.Thread(target=remind, name="progress", daemon=True)
        reminder.start()
        try:
            yield
        finally:
            done.set()
            reminder.join()

    def wait_for(
        self, probe: Callable[[], T | None], what: str, timeout: float, ignore: tuple[type[BaseException], ...] = ()
    ) -> T:
        with self.waiting(what):
            return wait_for(probe, what, timeout=timeout, ignore=ignore)


class LogFollower:
    """The lines a growing log gains from where it was when followed; only whole lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self._partial = ""

    def new_lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with self.path.open(errors="replace") as log:
            log.seek(self.offset)
            text = log.read()
            self.offset = log.tell()
        *lines, self._partial = (self._partial + text).split("\n")
        return lines
