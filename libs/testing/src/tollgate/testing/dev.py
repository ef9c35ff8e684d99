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
import asyncio
import errno
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import yaml

from tollgate.cli.exits import Exit
from tollgate.models.envoy import BOOTSTRAP_KEY, ENVOY_CONTAINER, ENVOY_PROXY_LABEL, ads_bootstrap
from tollgate.testing import node
from tollgate.testing.agents import CA_FILE, certificates
from tollgate.testing.cluster import dev_cluster, dev_dir
from tollgate.testing.echo import TCPEcho, UDPEcho, tcp_request, udp_request
from tollgate.testing.jaeger import Jaeger
from tollgate.testing.restarts import CrashLoop
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for

T = TypeVar("T")

RESOURCES_FILE = Path("deploy") / "local" / "resources.yaml"


@dataclass(frozen=True)
class Resource:
    """One entry of deploy/local/resources.yaml: a process (`module`) or a one-shot step (`step`)."""

    name: str
    module: str | None = None
    step: str | None = None
    health: int | None = None
    after: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)


def local_resources(root: Path, dev_dir: Path) -> list[Resource]:
    """The local system's resources in start order, with {dev} replaced by the state directory."""
    entries = yaml.safe_load((root / RESOURCES_FILE).read_text())["resources"]
    return [
        Resource(
            name=entry["name"],
            module=entry.get("module"),
            step=entry.get("step"),
            health=entry.get("health"),
            after=tuple(entry.get("after", ())),
            env={key: str(value).replace("{dev}", str(dev_dir)) for key, value in entry.get("env", {}).items()},
            endpoints=entry.get("endpoints", {}),
        )
        for entry in entries
    ]


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


def listening_pids(port: int) -> list[int]:
    """The processes with a TCP socket listening on `port` (any address), as far as this user can see them."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    pids = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pids.append(int(fd_dir.parent.name))
        except OSError:  # gone, or another user's
            continue
    return sorted(pids)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services bind: TIME_WAIT is no owner
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def busy_ports(ports: dict[int, str]) -> list[str]:
    """One line for every port (port -> what needs it) that something else already listens on, naming it."""
    lines = []
    for port, purpose in sorted(ports.items()):
        if not port_in_use(port):
            continue
        holders = [f"pid {pid} ({_command_line(pid)[:100]})" for pid in listening_pids(port)]
        held = ", ".join(holders) or f"a process this user cannot see (`sudo ss -ltnp 'sport = :{port}'` names it)"
        lines.append(f"port {port} ({purpose}) is in use by {held}")
    return lines


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


class DevSystem:
    def __init__(self, root: Path, state: Path | None = None, progress: Progress | None = None) -> None:
        """`root` is the checkout (CRDs, samples); `state` holds the cluster, logs and certificates (.dev)."""
        self.root = root
        self.progress = progress or Progress()
        self.dev_dir = state or dev_dir(root)
        self.cluster = dev_cluster(root, self.dev_dir, "tollgate" if state is None else "tollgate-dev")
        self.cluster.real_node = True  # the Envoys the system configures run as containers
        self.resources = local_resources(root, self.dev_dir)
        self.processes: dict[str, ServiceProcess] = {}
        self.restarter = Restarter(self.processes, self.say)
        self.echo: EchoThread | None = None
        self.proof: list[str] = []
        # The trace backend: every service sends its spans there (OTEL_EXPORTER_OTLP_ENDPOINT).
        self.jaeger = Jaeger(self.dev_dir / "jaeger")
        self.steps: dict[str, Callable[[], None]] = {
            "cluster": self._start_cluster,
            "crds": self._install_crds,
            "certificates": self._write_certificates,
            "register-webhook": self._register_webhook,
            "samples": self._apply_samples,
            "data-path": self._prove_data_path,
        }

    def say(self, text: str) -> None:
        self.progress.say(text)

    def ports(self) -> dict[int, str]:
        """The ports the services listen on (deploy/local/resources.yaml): port -> what needs it."""
        ports = {}
        for resource in self.resources:
            if resource.health is not None:
                ports[resource.health] = f"{resource.name} health"
            for name, endpoint in resource.endpoints.items():
                port = re.search(r":(\d+)(?:/|$)", endpoint)
                if port is not None:
                    ports[int(port.group(1))] = f"{resource.name} {name}"
        return ports

    def start(self) -> None:
        rotate_logs(self.dev_dir / "logs", [r.name for r in self.resources if r.module is not None])
        with self.progress.waiting(f"Jaeger to answer {self.jaeger.ui_url}"):
            self.jaeger.start()
        self.say(f"traces     Jaeger UI {self.jaeger.ui_url} (OTLP {self.jaeger.otlp_endpoint}, in memory)")
        self.restarter.start()
        for resource in self.resources:
            if resource.step is not None:
                self.steps[resource.step]()
            else:
                process = self.service_process(resource)
                self.processes[resource.name] = process
                self.say(f"  {resource.name:<10} starting (log {process.log_path})")
                with self.progress.waiting(f"{resource.name} to answer {process.health_url}/readyz"):
                    process.start().wait_ready(timeout=120)
                self.say(f"  {resource.name:<10} ready   health {process.health_url}")

    def service_process(self, resource: Resource) -> ServiceProcess:
        assert resource.module is not None and resource.health is not None
        process = ServiceProcess(
            resource.name,
            self.cluster.kubeconfig,
            self.dev_dir / "logs",
            env={**self.jaeger.env(), **resource.env},
            module=resource.module,
            health_port=resource.health,
        )
        process.log_path = self.dev_dir / "logs" / f"{resource.name}.log"
        return process

    def resource(self, name: str) -> Resource:
        return next(r for r in self.resources if r.name == name)

    def _start_cluster(self) -> None:
        self.say(f"cluster    starting (etcd, kube-apiserver, controllers, kwok; logs {self.cluster.logs_dir()})")
        with self.progress.waiting("the embedded cluster, its real node and 3 KWOK nodes to be ready"):
            seconds = self.cluster.up(3)
        self.say(f"cluster ready in {seconds:.1f} s (KUBECONFIG={self.cluster.kubeconfig})")

    def _install_crds(self) -> None:
        self.cluster.install_crds()
        self.cluster.kubectl("create", "namespace", "tollgate-system", check=False)
        self.say("  CRDs       installed")

    def _write_certificates(self) -> None:
        self._webhook_cli("certs", "--dir", str(self.dev_dir / "webhook"), "--host", "127.0.0.1")
        self.say(f"  webhook    certificates in {self.dev_dir / 'webhook'}")
        certificates(self.allocator_dir)
        self.say(f"  allocator  certificates in {self.allocator_dir} (the registration API serves TLS)")

    @property
    def allocator_dir(self) -> Path:
        """The allocator's serving pair and CA, and root's token for the registration API (root.token)."""
        return self.dev_dir / "allocator"

    def _mint_root_token(self) -> Path:
        """The root account's token, minted as a user mints it: `epicctl credentials create` (rotate when the
        account has one already, exit 4)."""
        token_file = self.allocator_dir / "root.token"
        for verb in ("create", "rotate"):
            command = [sys.executable, "-m", "tollgate.cli.epicctl", "credentials", verb, "root",
                       "--token-file", str(token_file), "--kubeconfig", str(self.cluster.kubeconfig)]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode == 0:
                return token_file
            if result.returncode != Exit.CONFLICT:
                raise RuntimeError(f"epicctl credentials {verb} root: {result.stderr.strip()}")
        raise RuntimeError("epicctl credentials: root's token was neither created nor rotated")

    def _register(self, *args: str) -> str | None:
        """One call of the registration API as an agent makes it: over TLS with the allocator's CA, with root's
        token; its answer (a JSON line), None when refused."""
        command = [sys.executable, "-m", "tollgate.allocator.grpc.client",
                   "--address", self.resource("allocator").endpoints["grpc"],
                   "--ca-file", str(self.allocator_dir / CA_FILE),
                   "--token-file", str(self.allocator_dir / "root.token"), *args]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else None

    def _apply_samples(self) -> None:
        for sample in sorted((self.root / "deploy" / "samples").glob("*.yaml"), key=_sample_order):
            self.cluster.kubectl("apply", "-f", str(sample))
        self.say("  samples    applied (through the webhook)")

    def _webhook_cli(self, *args: str) -> str:
        command = [sys.executable, "-m", "tollgate.webhook.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    def _register_webhook(self) -> None:
        configurations = self._webhook_cli(
            "configurations",
            "--url",
            self.resource("webhook").endpoints["admission"],
            "--ca-file",
            str(self.dev_dir / "webhook" / "ca.crt"),
        )
        self.cluster.kubectl("apply", "-f", "-", stdin=configurations)
        self.say("  webhook    registered for every kind")

    def _deregister_webhook(self) -> None:
        # failurePolicy is Fail: a registration left behind would refuse every tollgate object.
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            self.cluster.kubectl("delete", kind, "tollgate-webhook", "--ignore-not-found", check=False)

    def _prove_data_path(self) -> None:
        """One datagram and one TCP connection through an Envoy container, configured by a VirtualService."""
        for address in (ECHO_HOST, LB_UPSTREAM, LB_CLIENT_NODE):
            self.cluster.node().add_address(address)
        echo = self.echo = EchoThread()
        udp_port, tcp_port = echo.start()
        host, _, port = self.resource("xds").endpoints["ads"].rpartition(":")
        objects = proof_objects(udp_port, tcp_port, host, int(port))
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        pod_ip = self.progress.wait_for(
            lambda: (
                self.cluster.kubectl(
                    "get", "pod", "dev-proxy", "-n", PROOF_NAMESPACE, "-o", "jsonpath={.status.podIP}", check=False
                ).stdout
            ),
            "the dev-proxy Envoy pod to get an IP",
            timeout=120,
        )
        udp_reply = self.progress.wait_for(
            lambda: echo.call(udp_request(pod_ip, PROOF_UDP_PORT, b"datagram from make dev", timeout=1)),
            f"a UDP reply through Envoy at {pod_ip}:{PROOF_UDP_PORT}",
            timeout=120,
            ignore=(OSError, TimeoutError),
        )
        tcp_reply = self.progress.wait_for(
            lambda: echo.call(tcp_request(pod_ip, PROOF_TCP_PORT, b"stream from make dev", timeout=1)),
            f"a TCP reply through Envoy at {pod_ip}:{PROOF_TCP_PORT}",
            timeout=60,
            ignore=(OSError, TimeoutError),
        )
        self.proof = [
            f"  UDP  {pod_ip}:{PROOF_UDP_PORT} -> Envoy -> {udp_reply.decode()!r}",
            f"  TCP  {pod_ip}:{PROOF_TCP_PORT} -> Envoy -> {tcp_reply.decode()!r}",
            self._prove_public_address(echo),
        ]
        self.say("  data path  proved:\n" + "\n".join(self.proof))

    def _prove_public_address(self, echo: EchoThread) -> str:
        """One datagram to a load balancer's public address, allocated from the dev ServicePrefix (which the real
        node routes to the Envoy container), through the load balancer's Envoy to a simulated remote endpoint."""
        echo.call(echo.lb_upstream.start())
        objects = public_address_objects(echo.lb_upstream.port)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        self._mint_root_token()
        endpoint = ("register", "root", "dev-public", LB_UPSTREAM, str(echo.lb_upstream.port), "--protocol", "UDP",
                    "--node-address", LB_CLIENT_NODE)  # fmt: skip
        registered = json.loads(wait_for(lambda: self._register(*endpoint), "the upstream's registration", timeout=60))
        self.say(f"  registered {LB_UPSTREAM} over TLS as account root: tunnel {registered['tunnel']['tunnelId']}")

        def address() -> str:
            jsonpath = "jsonpath={.spec.public-address}"
            found = self.cluster.kubectl("get", "lb", "dev-public", "-n", "epic-root", "-o", jsonpath, check=False)
            return found.stdout.strip()

        public = self.progress.wait_for(address, "the dev-public load balancer to get its public address", timeout=60)
        reply = self.progress.wait_for(
            lambda: echo.call(udp_request(public, PROOF_LB_PORT, b"datagram to a public address", timeout=1)),
            f"a UDP reply through the load balancer at {public}:{PROOF_LB_PORT}",
            timeout=120,
            ignore=(OSError, TimeoutError),
        )
        return f"  LB   {public}:{PROOF_LB_PORT} (ServicePrefix {DEV_PREFIX}) -> Envoy -> {reply.decode()!r}"

    def stop(self) -> None:
        self.restarter.stop()
        if "webhook" in self.processes:
            self._deregister_webhook()
        for name, process in reversed(self.processes.items()):
            code = process.stop()
            self.say(f"  {name:<10} stopped (exit {code})")
        self.processes.clear()
        if self.echo is not None:
            self.echo.stop()
        self.jaeger.stop()

    def summary(self) -> str:
        lines = ["", "tollgate dev system", "", "services:"]
        for resource in self.resources:
            if resource.module is None:
                continue
            process = self.processes.get(resource.name)
            state = "ready" if process is not None and _ready(process) else "DOWN"
            endpoints = "  ".join(f"{k} {v}" for k, v in resource.endpoints.items())
            health = process.health_url if process else "-"
            restarts = self.restarter.restarts(resource.name)
            lines.append(f"  {resource.name:<10} {state:<6} restarts {restarts:<3} health {health}  {endpoints}")
        lines += ["", "registration API (TLS; per-account tokens: epicctl credentials create|rotate ACCOUNT):",
                  f"  {self.resource('allocator').endpoints['grpc']}  CA {self.allocator_dir / CA_FILE}  "
                  f"root's token {self.allocator_dir / 'root.token'}"]  # fmt: skip
        lines += ["", "EPIC's REST API (TLS, same CA; HTTP Basic: epicctl create user, or the same bearer token):",
                  f"  https://{self.resource('allocator').endpoints['rest']}/api/epic"]  # fmt: skip
        lines += ["", "traces (Jaeger, in memory; a change is one trace: admission, reconcile, xds push, Envoy ACK):",
                  f"  {self.jaeger.ui_url}/search?service=tollgate-allocator"]  # fmt: skip
        lines += ["", "control plane (restarted by the cluster's watchdog when a process exits):"]
        running = self.cluster.pids()
        for component, restarts in self.cluster.restarts().items():
            pid = f"pid {running[component]}" if component in running else "DOWN"
            lines.append(f"  {component:<24} {pid:<10} restarts {restarts}")
        lines += ["", "custom resources (Ready):"]
        for kind, name, ready in self._resources():
            lines.append(f"  {kind:<22} {name:<40} {ready}")
        lines += ["", "tunnel IDs:"]
        lines += [f"  {lb:<40} {address:<16} tunnel {tunnel}" for lb, address, tunnel in self._tunnels()] or ["  none"]
        lines += ["", f"Envoy proxies (sync per type: epicctl proxy-status --xds-url {self.xds_debug_url}):"]
        lines += self._proxies() or ["  none"]
        lines += ["", "data path (echo servers answer with their name):", *self.proof]
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

    @property
    def xds_debug_url(self) -> str:
        """The xds debug API, which `epicctl proxy-status --xds-url` asks: here xds is a process, not a pod the API
        server's pods proxy would find (docs/xds.md, *Debug API*)."""
        return self.resource("xds").endpoints["debug"].removesuffix("/debug/envoys")

    def _proxies(self) -> list[str]:
        envoys = _http_json(self.resource("xds").endpoints["debug"]) or []
        sync = {e["node"]: "in sync" if e.get("in_sync") else "syncing" for e in envoys if isinstance(e, dict)}
        rows = []
        for pod in self._get("pods"):
            labels = pod["metadata"].get("labels", {})
            if ENVOY_PROXY_LABEL not in labels:
                continue
            node = f"{pod['metadata']['name']}.{pod['metadata']['namespace']}"
            ready: dict[str, str] = next((c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"), {})
            state = sync.get(node, "not connected")
            readiness = "Ready" if ready.get("status") == "True" else "NotReady"
            rows.append(f"  {node:<50} {pod['status'].get('podIP', '-'):<12} {readiness:<12} xds {state}")
        return rows


PROOF_NAMESPACE = "tollgate-dev"
PROOF_UDP_PORT, PROOF_TCP_PORT, PROOF_LB_PORT = 7001, 7002, 7003
# Addresses of the real node's ranges (tollgate.testing.cluster): a simulated remote node serving the echo servers,
# another with a client cluster's endpoint; the dev pool is public addresses the node routes to Envoy pods.
ECHO_HOST = "192.0.2.70"
LB_UPSTREAM, LB_CLIENT_NODE = "192.0.2.72", "192.0.2.71"
DEV_PREFIX, DEV_POOL = "dev", "192.0.2.224/27"


def public_address_objects(upstream_port: int) -> list[dict[str, Any]]:
    """The dev ServicePrefix, a service group of the root account drawing from it, and a load balancer without an
    address (its endpoint is registered over the registration API, as a client cluster's agent registers it)."""
    epic = {"apiVersion": "epic.acnodal.io/v1"}
    return [
        epic | {"kind": "ServicePrefix", "metadata": {"name": DEV_PREFIX, "namespace": "epic"},
                "spec": {"public-pool": {"pool": DEV_POOL}}},
        epic | {"kind": "LBServiceGroup", "metadata": {"name": "dev-public", "namespace": "epic-root"},
                "spec": {"envoy-replica-count": 1, "service-prefix": DEV_PREFIX}},
        epic | {"kind": "LoadBalancer", "metadata": {"name": "dev-public", "namespace": "epic-root"},
                "spec": {"service-group": "dev-public",
                         "public-ports": [{"port": PROOF_LB_PORT, "protocol": "UDP", "targetPort": upstream_port}]}},
    ]  # fmt: skip


def proof_objects(udp_port: int, tcp_port: int, xds_host: str, xds_port: int) -> list[dict[str, Any]]:
    """An Envoy pod fed by the xds service, and a VirtualService routing to the dev echo servers."""
    labels = {ENVOY_PROXY_LABEL: "true", "app": "dev-proxy"}

    def listener(protocol: str, port: int, upstream: int) -> dict[str, Any]:
        cluster = {
            "name": f"dev-echo-{protocol}",
            "endpoints": [{"name": f"echo-{protocol}", "host": {"address": ECHO_HOST}, "port": upstream}],
        }
        return {"name": f"dev-{protocol}", protocol: {"port": port, "cluster": cluster}}

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROOF_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dev-proxy", "namespace": PROOF_NAMESPACE},
            "data": {BOOTSTRAP_KEY: yaml.safe_dump(ads_bootstrap(xds_host, xds_port))},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "dev-proxy", "namespace": PROOF_NAMESPACE, "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": ENVOY_CONTAINER,
                        "image": "envoyproxy/envoy:v1.40.0",
                        "args": [
                            "-c",
                            f"/etc/envoy/{BOOTSTRAP_KEY}",
                            "--service-node",
                            "dev-proxy.tollgate-dev",
                            "--service-cluster",
                            "dev",
                        ],
                        "volumeMounts": [{"name": "bootstrap", "mountPath": "/etc/envoy"}],
                    }
                ],
                "volumes": [{"name": "bootstrap", "configMap": {"name": "dev-proxy"}}],
                **node.REAL_NODE_PLACEMENT,
            },
        },
        {
            "apiVersion": "servicemesh.l7mp.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "dev-proof", "namespace": PROOF_NAMESPACE},
            "spec": {
                "selector": {"app": "dev-proxy"},
                "listeners": [listener("udp", PROOF_UDP_PORT, udp_port), listener("tcp", PROOF_TCP_PORT, tcp_port)],
            },
        },
    ]


class EchoThread:
    """UDP and TCP echo servers on ECHO_HOST, in an event loop of their own for the life of the dev system."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.udp = UDPEcho(ECHO_HOST, name="udp-echo")
        self.tcp = TCPEcho(ECHO_HOST, name="tcp-echo")
        self.lb_upstream = UDPEcho(LB_UPSTREAM, name="lb-echo")

    def start(self) -> tuple[int, int]:
        self.thread.start()
        self.call(self.udp.start())
        self.call(self.tcp.start())
        return self.udp.port, self.tcp.port

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.call(self.udp.stop())
        self.call(self.tcp.stop())
        self.call(self.lb_upstream.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


def _sample_order(path: Path) -> tuple[bool, str]:
    return (not path.name.startswith("epic-"), path.name)


def _ready(process: ServiceProcess) -> bool:
    try:
        process.wait_ready(timeout=2)
    except Exception:
        return False
    return True


def _http_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.load(response)
    except Exception:
        return None


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


def left_behind(ports: dict[int, str]) -> dict[int, str]:
    """This checkout's services still listening on the dev system's ports after the `make dev` that started them
    was killed (its services outlive it): pid -> command line."""
    ours = f"{sys.executable} -m tollgate."
    pids = {pid for port in ports for pid in listening_pids(port)}
    return {pid: line for pid in sorted(pids) if (line := _command_line(pid)).startswith(ours)}


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
