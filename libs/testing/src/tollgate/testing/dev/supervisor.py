"""The dev system's services kept running, as a kubelet keeps its containers, each with one log per run of
`make dev`."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tollgate.testing.restarts import CrashLoop
from tollgate.testing.services import ServiceProcess


def rotate_logs(log_dir: Path, names: list[str]) -> None:
    """One log per service and run: <name>.log of the previous run becomes <name>.log.1 (the one before goes), and
    the per-pid logs that earlier versions left (<name>-<pid>-<n>.log, a new set every run) are removed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        current = log_dir / f"{name}.log"
        if current.exists():
            current.replace(log_dir / f"{name}.log.1")
        for stale in log_dir.glob(f"{name}-*.log"):
            if re.fullmatch(rf"{re.escape(name)}-\d+-\d+\.log", stale.name):
                stale.unlink()


class Restarter:
    """Keeps the dev system's services running, as a kubelet keeps its containers: a service that exits is started
    again, appending to the same log, after a CrashLoopBackOff delay (1 s, doubled per crash in a row, at most
    30 s); each exit and restart is said, and counted for the summary."""

    def __init__(self, processes: dict[str, ServiceProcess], say: Callable[[str], None]) -> None:
        self.processes = processes
        self.say = say
        self.loops: dict[str, CrashLoop] = {}
        self.started: dict[str, float] = {}
        self.due: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="restarter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Before the services are stopped, so that none is started again."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def restarts(self, name: str) -> int:
        loop = self.loops.get(name)
        return loop.restarts if loop is not None else 0

    def total(self) -> int:
        return sum(loop.restarts for loop in self.loops.values())

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.check()

    def check(self) -> None:
        now = time.monotonic()
        for name, service in list(self.processes.items()):
            loop = self.loops.setdefault(name, CrashLoop())
            started = self.started.setdefault(name, now)
            if name in self.due:
                if now >= self.due[name]:
                    self._restart(name, service, loop)
                continue
            code = service.process.poll() if service.process is not None else None
            if code is None:
                continue
            delay = loop.delay(now - started)
            self.due[name] = now + delay
            self.say(f"  {name:<10} exited ({code}); starting it again in {delay:g} s")

    def _restart(self, name: str, service: ServiceProcess, loop: CrashLoop) -> None:
        service.stop()  # reaps the exited process and closes its log
        service.start()
        loop.restarts += 1
        self.started[name] = time.monotonic()
        del self.due[name]
        pid = service.process.pid if service.process is not None else None
        self.say(f"  {name:<10} restarted (pid {pid}, restart {loop.restarts}); log {service.log_path}")
