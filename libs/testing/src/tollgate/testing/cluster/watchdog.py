"""The cluster's watchdog: `python -m tollgate.testing.cluster watch`, started detached by EmbeddedCluster.up."""

from __future__ import annotations

import logging
import threading
import time

from tollgate.testing.cluster.embedded import EmbeddedCluster
from tollgate.testing.restarts import CrashLoop

log = logging.getLogger("tollgate.testing.cluster")


class ControlPlaneWatchdog:
    """Keeps every process kwokctl started running, and the real node's containerd, kubelet and kube-proxy, the way
    a kubelet keeps its static pods: one that exited is started again after a CrashLoopBackOff delay (1 s, doubling
    per crash in a row, at most 30 s), and each restart is logged with its count. kwokctl itself starts the
    components once and never looks again."""

    def __init__(self, cluster: EmbeddedCluster, interval: float = 1.0) -> None:
        self.cluster = cluster
        self.interval = interval
        self.components = cluster.components()
        self.loops = {name: CrashLoop() for name in self.components}
        self.started = dict.fromkeys(self.components, time.monotonic())

    def run(self, stop: threading.Event) -> None:
        log.info("watching %s of cluster %s", ", ".join(self.components), self.cluster.name)
        while not stop.wait(self.interval):
            self.check(stop)

    def check(self, stop: threading.Event) -> None:
        if not self.cluster.exists():  # deleted without `down` (a test session's temporary directory removed)
            log.info("cluster %s is gone; stopping", self.cluster.name)
            stop.set()
            return
        running = self.cluster.pids()
        exited = [name for name in self.components if name not in running]
        if not exited:
            return
        now = time.monotonic()
        delay = max(self.loops[name].delay(now - self.started[name]) for name in exited)
        for name in exited:
            log.warning("%s exited; starting it again in %g s", name, delay, extra={"component": name})
        if stop.wait(delay):
            return
        restarted = self.cluster.restart_exited(exited)
        for name in exited:
            self.started[name] = time.monotonic()
            if name in restarted:
                self.loops[name].restarts += 1
                restarts = self.loops[name].restarts
                log.warning(
                    "%s restarted (pid %d, restart %d)",
                    name,
                    restarted[name],
                    restarts,
                    extra={"component": name, "pid": restarted[name], "restarts": restarts},
                )
