"""`make dev`: the whole system on the embedded cluster.

    python -m tollgate.testing.dev run     foreground; Ctrl-C stops everything
    python -m tollgate.testing.dev up      the same, detached (make dev-up); prints the summary
    python -m tollgate.testing.dev down    stops what `up` started, and the cluster (make dev-down)

It starts the embedded cluster, installs the CRDs, runs the Envoy supervisor and all five services as
processes (logs in .dev/logs/), registers the webhook, applies the samples, proves the data path with one
datagram and one TCP connection through a real Envoy to echo servers, and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tollgate.testing.cluster import EmbeddedCluster, dev_cluster
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tools import repo_root

XDS_PORT = 18000
XDS_DEBUG_PORT = 18080
ALLOCATOR_GRPC_PORT = 19090
WEBHOOK_PORT = 19443


@dataclass
class Component:
    name: str
    module: str
    env: dict[str, str] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)


def components(dev_dir: Path) -> list[Component]:
    return [
        Component("supervisor", "tollgate.testing.supervisor", {"TOLLGATE_SUPERVISOR_LOG_DIR": str(dev_dir / "envoy")}),
        Component(
            "webhook",
            "tollgate.webhook",
            {"TOLLGATE_WEBHOOK_PORT": str(WEBHOOK_PORT), "TOLLGATE_WEBHOOK_CERT_DIR": str(dev_dir / "webhook-certs")},
            {"admission": f"https://127.0.0.1:{WEBHOOK_PORT}"},
        ),
        Component(
            "allocator",
            "tollgate.allocator",
            {
                "TOLLGATE_ALLOCATOR_GRPC_ADDRESS": f"127.0.0.1:{ALLOCATOR_GRPC_PORT}",
                "TOLLGATE_ALLOCATOR_XDS_ADDRESS": f"127.0.0.1:{XDS_PORT}",
            },
            {"grpc": f"127.0.0.1:{ALLOCATOR_GRPC_PORT}"},
        ),
        Component(
            "xds",
            "tollgate.xds",
            {
                "TOLLGATE_XDS_GRPC_ADDRESS": f"127.0.0.1:{XDS_PORT}",
                "TOLLGATE_XDS_DEBUG_ADDRESS": f"127.0.0.1:{XDS_DEBUG_PORT}",
            },
            {"ads": f"127.0.0.1:{XDS_PORT}", "debug": f"http://127.0.0.1:{XDS_DEBUG_PORT}"},
        ),
        Component("routedip", "tollgate.routedip"),
        Component("jobs", "tollgate.jobs"),
    ]


class DevSystem:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dev_dir = root / ".dev"
        self.cluster: EmbeddedCluster = dev_cluster(root)
        self.processes: dict[str, ServiceProcess] = {}

    def say(self, text: str) -> None:
        print(text, flush=True)

    def start(self) -> None:
        seconds = self.cluster.up(3)
        self.say(f"cluster ready in {seconds:.1f} s (KUBECONFIG={self.cluster.kubeconfig})")
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.root / "crds"))
        self.cluster.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=tollgate")
        for component in components(self.dev_dir):
            process = ServiceProcess(
                component.name,
                self.cluster.kubeconfig,
                self.dev_dir / "logs",
                env=component.env,
                module=component.module,
            )
            self.processes[component.name] = process
            process.start().wait_ready(timeout=90)
            self.say(f"  {component.name:<10} ready   health {process.health_url}")
        for sample in sorted((self.root / "deploy" / "samples").glob("*.yaml"), key=_sample_order):
            self.cluster.kubectl("apply", "-f", str(sample))
        self.say("samples applied")

    def stop(self) -> None:
        for name, process in reversed(self.processes.items()):
            code = process.stop()
            self.say(f"  {name:<10} stopped (exit {code})")
        self.processes.clear()

    def summary(self) -> str:
        lines = ["", "tollgate dev system", "", "services:"]
        for component in components(self.dev_dir):
            process = self.processes.get(component.name)
            state = "ready" if process is not None and _ready(process) else "DOWN"
            endpoints = "  ".join(f"{k} {v}" for k, v in component.endpoints.items())
            health = process.health_url if process else "-"
            lines.append(f"  {component.name:<10} {state:<6} health {health}  {endpoints}")
        lines += ["", "custom resources (Ready):"]
        for kind, name, ready in self._resources():
            lines.append(f"  {kind:<22} {name:<40} {ready}")
        lines += ["", "tunnel IDs:"]
        lines += [f"  {lb:<40} {address:<16} tunnel {tunnel}" for lb, address, tunnel in self._tunnels()] or ["  none"]
        lines += ["", "Envoy proxies:"]
        lines += self._proxies() or ["  none"]
        return "\n".join(lines) + "\n"

    def _get(self, resource: str) -> list[dict[str, Any]]:
        result = self.cluster.kubectl("get", resource, "-A", "-o", "json", check=False)
        return list(json.loads(result.stdout).get("items", [])) if result.returncode == 0 else []

    def _resources(self) -> list[tuple[str, str, str]]:
        rows = []
        for item in self._get("tollgate"):
            meta = item["metadata"]
            conditions = {c["type"]: c for c in item.get("status", {}).get("conditions", [])}
            ready = conditions.get("Ready") or conditions.get("Programmed") or conditions.get("Complete")
            state = f"{ready['type']}={ready['status']} ({ready.get('reason', '')})" if ready else "no condition yet"
            where = f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/")
            rows.append((item["kind"], where, state))
        return rows

    def _tunnels(self) -> list[tuple[str, str, int]]:
        rows = []
        for lb in self._get("loadbalancers.epic.acnodal.io"):
            for address, tunnel in lb.get("status", {}).get("gue-tunnel-endpoints", {}).items():
                rows.append((f"{lb['metadata']['namespace']}/{lb['metadata']['name']}", address, tunnel["tunnel-id"]))
        return rows

    def _proxies(self) -> list[str]:
        sync = _http_json(f"http://127.0.0.1:{XDS_DEBUG_PORT}/debug/sync") or {}
        rows = []
        for pod in self._get("pods"):
            labels = pod["metadata"].get("labels", {})
            if "tollgate.io/envoy-proxy" not in labels:
                continue
            node = f"{pod['metadata']['name']}.{pod['metadata']['namespace']}"
            ready: dict[str, str] = next((c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"), {})
            state = sync.get(node, {}).get("state", "not connected") if isinstance(sync, dict) else "?"
            rows.append(
                f"  {node:<50} {pod['status'].get('podIP', '-'):<12} {ready.get('reason', '-'):<12} xds {state}"
            )
        return rows


def _sample_order(path: Path) -> tuple[bool, str]:
    return (not path.name.startswith("epic-"), path.name)


def _ready(process: ServiceProcess) -> bool:
    try:
        process.wait_ready(timeout=2)
    except Exception:
        return False
    return True


def _http_json(url: str) -> Any:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.load(response)
    except Exception:
        return None


def run(root: Path) -> int:
    system = DevSystem(root)
    stop = False

    def request_stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        system.start()
        text = system.summary()
        (system.dev_dir / "summary.txt").write_text(text)
        system.say(text + "Ctrl-C stops everything.")
        while not stop:
            signal.sigtimedwait([signal.SIGINT, signal.SIGTERM], 1.0)
    finally:
        system.say("stopping")
        system.stop()
        system.cluster.down()
        (system.dev_dir / "summary.txt").unlink(missing_ok=True)
    return 0


def up(root: Path) -> int:
    dev_dir = root / ".dev"
    dev_dir.mkdir(exist_ok=True)
    (dev_dir / "summary.txt").unlink(missing_ok=True)
    log = (dev_dir / "dev.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "tollgate.testing.dev", "run"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    (dev_dir / "dev.pid").write_text(str(process.pid))
    deadline = time.monotonic() + 600
    while not (dev_dir / "summary.txt").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            print((dev_dir / "dev.log").read_text()[-4000:], file=sys.stderr)
            return 1
        time.sleep(0.5)
    print((dev_dir / "summary.txt").read_text())
    print(f"running detached (pid {process.pid}, log .dev/dev.log); `make dev-down` stops it")
    return 0


def down(root: Path) -> int:
    pid_file = root / ".dev" / "dev.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            while True:
                os.kill(pid, 0)
                time.sleep(0.2)
        except ProcessLookupError:
            pass
        pid_file.unlink()
    dev_cluster(root).down()
    print("dev system stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tollgate.testing.dev", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["run", "up", "down"])
    args = parser.parse_args(argv)
    root = repo_root()
    actions = {"run": run, "up": up, "down": down}
    return actions[args.action](root)


if __name__ == "__main__":
    sys.exit(main())
