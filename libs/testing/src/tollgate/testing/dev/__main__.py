"""`make dev`: the whole system on the embedded cluster.

    python -m tollgate.testing.dev run     foreground; Ctrl-C stops everything
    python -m tollgate.testing.dev up      the same, detached (make dev-up); prints the summary
    python -m tollgate.testing.dev down    stops what `up` started, and the cluster (make dev-down)
    python -m tollgate.testing.dev step S  one step of deploy/local/resources.yaml (Tilt's local mode runs them)

It starts the embedded cluster with its real node (tollgate.testing.node: needs Linux and root), installs the
CRDs, runs all five services as processes of this checkout, registers the webhook, applies the samples, proves the
data path with one datagram and one TCP connection through an Envoy container to echo servers on a simulated remote
node, and one datagram to a load balancer's public address (from the ServicePrefix `dev`, pool DEV_POOL, which the
node routes to the load balancer's Envoy container), and prints a summary. Logs go to .dev/logs/<service>.log
(the previous run's to <service>.log.1); a service that exits is started again after a back-off, and the summary
counts its restarts.

Every line it prints starts with the seconds since it started; while it waits (the cluster, a service's /readyz, the
data path), it says every TOLLGATE_DEV_TICK seconds (default 10) what it is still waiting for. Before anything starts
it checks that the system's ports are free, and names the process that holds one.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tollgate.testing import node
from tollgate.testing.cluster import dev_cluster, dev_dir
from tollgate.testing.dev.ports import busy_ports, left_behind
from tollgate.testing.dev.progress import LogFollower, Progress
from tollgate.testing.dev.system import DevSystem
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for


def refuse_busy_ports(system: DevSystem) -> bool:
    """Before anything starts: say which of the system's ports are taken, and by whom; True when one is."""
    busy = busy_ports(system.ports())
    for line in busy:
        print(f"make dev: {line}", file=sys.stderr)
    if busy:
        advice = "stop it first (what an earlier make dev or dev-up left: `make dev-down`); see docs/troubleshooting.md"
        print(f"make dev: {advice}", file=sys.stderr)
    return bool(busy)


def running_pid(state: Path) -> int | None:
    """The pid of a detached dev system (`make dev-up`) that is still running; a stale dev.pid is removed."""
    pid_file = state / "dev.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pid_file.unlink()
        return None
    return pid


def run(root: Path) -> int:
    unsupported = node.unsupported_reason()
    if unsupported is not None:
        print(f"make dev: {unsupported}; use kind with Tilt's kind mode instead (docs/real-node.md)", file=sys.stderr)
        return 3
    system = DevSystem(root)
    if refuse_busy_ports(system):
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        system.start()
        text = system.summary()
        (system.dev_dir / "summary.txt").write_text(text)
        print(text, flush=True)
        system.say("Ctrl-C stops everything.")
        restarts = 0
        while not stop.wait(1.0):
            if system.restarter.total() != restarts:  # keep summary.txt's restart counts current
                restarts = system.restarter.total()
                (system.dev_dir / "summary.txt").write_text(system.summary())
    finally:
        system.say("stopping")
        system.stop()
        system.cluster.down()
        (system.dev_dir / "summary.txt").unlink(missing_ok=True)
    return 0


def run_step(root: Path, name: str) -> int:
    """One step of the local system, as Tilt's local mode runs it (deploy/local/resources.yaml)."""
    system = DevSystem(root)
    if name not in system.steps:
        print(f"step: {name!r} is not one of {', '.join(system.steps)}", file=sys.stderr)
        return 2
    try:
        system.steps[name]()
    finally:
        if system.echo is not None:
            system.echo.stop()
    return 0


def up(root: Path) -> int:
    """`make dev` detached: shows its progress lines (from .dev/dev.log) until the summary is written."""
    state = dev_dir(root)
    state.mkdir(exist_ok=True)
    pid = running_pid(state)
    if pid is not None:
        print(f"make dev-up: the dev system is already running (pid {pid}); `make dev-down` stops it", file=sys.stderr)
        return 1
    if refuse_busy_ports(DevSystem(root)):
        return 1
    (state / "summary.txt").unlink(missing_ok=True)
    log_path = state / "dev.log"
    follower = LogFollower(log_path)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tollgate.testing.dev", "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (state / "dev.pid").write_text(str(process.pid))
    print(f"make dev-up: starting the dev system detached (pid {process.pid}, log {log_path})", flush=True)
    deadline = time.monotonic() + 600
    while not (state / "summary.txt").exists():
        for line in follower.new_lines():
            if Progress.PREFIX.match(line):
                print(line, flush=True)
        if process.poll() is not None or time.monotonic() > deadline:
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            print(f"make dev-up: the dev system did not come up; the whole log is {log_path}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    print((state / "summary.txt").read_text())
    print(f"running detached (pid {process.pid}, log {log_path}); `make dev-down` stops it")
    return 0


def _stop(progress: Progress, pid: int, what: str) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with progress.waiting(f"{what} to stop"):
        wait_for(lambda: not _alive(pid), f"{what} to stop", timeout=math.inf, interval=0.2)


def down(root: Path) -> int:
    state = dev_dir(root)
    pid = running_pid(state)
    progress = Progress()
    if pid is not None:
        progress.say(f"stopping the dev system (pid {pid}): its services, then the cluster")
        _stop(progress, pid, f"pid {pid} (log {state / 'dev.log'})")
        (state / "dev.pid").unlink(missing_ok=True)
    for orphan, command in left_behind(DevSystem(root).ports()).items():
        progress.say(f"stopping pid {orphan} ({command}), left behind by a make dev that was killed")
        _stop(progress, orphan, f"pid {orphan}")
    with progress.waiting("the embedded cluster to stop"):
        dev_cluster(root).down()
    progress.say("dev system stopped")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tollgate.testing.dev", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["run", "up", "down", "step"])
    parser.add_argument("step", nargs="?", help="with `step`: one resource of deploy/local/resources.yaml to run")
    args = parser.parse_args(argv)
    root = repo_root()
    if args.action == "step":
        return run_step(root, args.step or "")
    actions = {"run": run, "up": up, "down": down}
    return actions[args.action](root)


if __name__ == "__main__":
    sys.exit(main())
