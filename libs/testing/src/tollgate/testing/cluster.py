"""The embedded cluster: a real kube-apiserver, etcd, controller-manager and scheduler, with KWOK
simulating nodes and pods, all started by `kwokctl --runtime binary` from the cached binaries.

Nodes get realistic labels, DigitalOcean-style providerIDs and pod CIDRs inside 127.0.0.0/8, so every
pod IP is a loopback address this machine can bind (process-backed Envoy pods listen there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tollgate.models.addresses import EndpointPolicy
from tollgate.runtime.logging import setup_logging
from tollgate.testing import images, node
from tollgate.testing.net import free_port
from tollgate.testing.processes import alive, pid_in, terminate
from tollgate.testing.restarts import CrashLoop
from tollgate.testing.tools import repo_root, tool

log = logging.getLogger("tollgate.testing.cluster")

ZONES = ("nyc3-a", "nyc3-b", "nyc3-c")
KWOK_MANAGED = "kwok.x-k8s.io/node"
# ClusterIPs: loopback addresses too (see kwokctl_config).
SERVICE_CIDR = "127.2.0.0/16"
# Pod IPs: each node's pod CIDR is a /24 of this (node_manifest).
POD_CIDR = "127.1.0.0/16"
# Simulated remote client nodes and their endpoints: the one loopback range the dev endpoint policy allows.
REMOTE_CIDR = "127.77.0.0/16"
# The endpoint policy of the dev system and the end-to-end tests (TOLLGATE_<SERVICE>_ENDPOINT_*_RANGES of the webhook
# and the allocator): the embedded cluster's own pod and Service ranges denied, 127.77.0.0/16 carved out of loopback.
DEV_ENDPOINT_DENIED_RANGES = f"{POD_CIDR},{SERVICE_CIDR}"
DEV_ENDPOINT_ALLOWED_RANGES = REMOTE_CIDR


def dev_endpoint_policy() -> EndpointPolicy:
    """The dev endpoint policy, for tests that build a service's parts in-process."""
    return EndpointPolicy.parse(DEV_ENDPOINT_DENIED_RANGES, DEV_ENDPOINT_ALLOWED_RANGES)


# The endpoint policy beside the real node: its pod and Service ranges and the node's address refused; endpoints
# are simulated remote nodes' addresses on the node's link (REMOTE_NODE_ADDRESSES), and loopback stays refused.
REAL_NODE_ENDPOINT_DENIED_RANGES = f"{node.POD_CIDR},{node.SERVICE_CIDR},{node.NODE_IP}/32"
# 192.0.2.64-192.0.2.191: simulated remote client nodes beside the real node (KWOK's nodes have .10-.12), on the
# machine; 192.0.2.192-192.0.2.254: load balancers' public addresses, which the node routes to their Envoy pods.
REMOTE_NODE_ADDRESSES = tuple(f"192.0.2.{host}" for host in range(64, 192))
PUBLIC_ADDRESSES = tuple(f"192.0.2.{host}" for host in range(192, 255))


def endpoint_policy_env(service: str, real_node: bool = False) -> dict[str, str]:
    """The endpoint policy of the dev system (or of a cluster with the real node) as the settings of `service`
    (tollgate.runtime.settings.EndpointPolicySettings)."""
    prefix = f"TOLLGATE_{service.upper()}_"
    if real_node:
        return {
            f"{prefix}ENDPOINT_DENIED_RANGES": REAL_NODE_ENDPOINT_DENIED_RANGES,
            f"{prefix}ENDPOINT_ALLOWED_RANGES": "",
        }
    return {
        f"{prefix}ENDPOINT_DENIED_RANGES": DEV_ENDPOINT_DENIED_RANGES,
        f"{prefix}ENDPOINT_ALLOWED_RANGES": DEV_ENDPOINT_ALLOWED_RANGES,
    }


PORT_OPTIONS = (
    "kubeApiserverPort",
    "etcdPort",
    "etcdPeerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)


class ClusterError(RuntimeError):
    pass


def node_manifest(index: int, real_node: bool = False, tainted: bool = True) -> dict[str, Any]:
    """KWOK's worker `index` (0-based): InternalIP 127.0.10.<index+1>, pods in 127.1.<index+1>.0/24; beside the real
    node, InternalIP 192.0.2.<index+10> and pods in 198.18.<index+1>.0/24 (neither assigned on the machine: KWOK only
    reports them), `tainted` so that only pods meant for many nodes land there."""
    name = f"tollgate-worker-{index}"
    pod_cidr = f"198.18.{index + 1}.0/24" if real_node else f"127.1.{index + 1}.0/24"
    internal_ip = f"192.0.2.{index + 10}" if real_node else f"127.0.10.{index + 1}"
    taints = [{"key": KWOK_MANAGED, "value": "fake", "effect": "NoSchedule"}] if real_node and tainted else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_MANAGED: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "s-2vcpu-4gb",
                "topology.kubernetes.io/region": "nyc3",
                "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
                "type": "kwok",
            },
        },
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "providerID": f"digitalocean://{400000 + index}",
            "taints": taints,
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ]
        },
    }


def kwokctl_config(disable_qps_limits: bool = False, real_node_pki: Path | None = None) -> str:
    """Every component listens on loopback only; benchmarks may lift the components' client QPS limits. Without
    the real node, pod IPs and ClusterIPs are loopback ranges (POD_CIDR, SERVICE_CIDR) that nothing serves: KWOK's
    pods are simulated, with KWOK's default stages.

    The controller-manager and the scheduler run without leader election. There is one instance of each, so
    there is nobody to elect: the Lease only ever names that instance, and what it costs is an exit, since a
    leader that cannot renew its Lease within the renew deadline (10 s) exits on purpose, so that a standby
    takes over. With no standby, an API server stalled for longer (a 45-s SIGSTOP did it) left a cluster where
    no Job got a pod again. Without the election they wait for the API server like every other client and
    carry on (tests/e2e/test_cluster_faults.py). Whatever else stops a component, the ControlPlaneWatchdog
    starts it again.

    With the real node (tollgate.testing.node) the API server also listens on the node's address on its bridge, so
    that pods reach it through the `kubernetes` Service; ClusterIPs come from 198.19.0.0/16, which kube-proxy
    serves; the API server reaches the kubelet (logs, exec, port-forward) at its InternalIP with the admin pair; and
    KWOK manages only the nodes annotated as its own, never the real one.
    """
    options: dict[str, object] = {"bindAddress": "127.0.0.1"}
    # kwokctl picks each port by scanning down from 32767 for one nobody listens on yet, so two clusters created
    # at the same moment (parallel test sessions) take the same ports and one API server fails to bind. Ports
    # the kernel hands out are spread over its whole ephemeral range instead.
    options |= {option: free_port() for option in PORT_OPTIONS}
    if disable_qps_limits:
        options["disableQPSLimits"] = True
    service_cidr = {
        "key": "service-cluster-ip-range",
        "value": SERVICE_CIDR if real_node_pki is None else node.SERVICE_CIDR,
    }
    no_election = {"key": "leader-elect", "value": "false"}
    apiserver_args = [service_cidr]
    kwok_args: list[dict[str, str]] = []
    if real_node_pki is not None:
        options["kubeApiserverCertSANs"] = [node.NODE_IP, "127.0.0.1", *node.API_SERVER_SERVICE_NAMES]
        apiserver_args += [
            # Pods reach it at the node's address, the other components at 127.0.0.1 (kwokctl's kubeconfigs name
            # that whatever bindAddress says); tollgate.testing.node lets only those two interfaces in.
            {"key": "bind-address", "value": "0.0.0.0"},
            {"key": "advertise-address", "value": node.NODE_IP},
            {"key": "kubelet-client-certificate", "value": str(real_node_pki / "admin.crt")},
            {"key": "kubelet-client-key", "value": str(real_node_pki / "admin.key")},
            {"key": "kubelet-preferred-address-types", "value": "InternalIP"},
        ]
        kwok_args = [
            {"key": "manage-all-nodes", "value": "false"},
            {"key": "manage-nodes-with-annotation-selector", "value": f"{KWOK_MANAGED}=fake"},
        ]
    configuration = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": options,
        "componentsPatches": [
            {"name": "kube-apiserver", "extraArgs": apiserver_args},
            {"name": "kube-controller-manager", "extraArgs": [no_election]},
            {"name": "kube-scheduler", "extraArgs": [no_election]},
            *([{"name": "kwok-controller", "extraArgs": kwok_args}] if kwok_args else []),
        ],
    }
    return yaml.safe_dump(configuration)


@dataclass
class EmbeddedCluster:
    name: str
    workdir: Path
    kubeconfig: Path
    disable_qps_limits: bool = False
    real_node: bool = False
    # Beside the real node: KWOK's nodes untainted and the real node tainted (node.REAL_NODE_TAINT), for a system
    # whose ordinary pods are simulated (the chaos suite's Goops, routed IPs on many droplets) and whose Envoys run.
    fake_nodes_take_pods: bool = False
    _remote_addresses: Iterator[int] = field(default_factory=itertools.count, repr=False, compare=False)
    _next_public: int = field(default=0, repr=False, compare=False)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "KWOK_WORKDIR": str(self.workdir)}

    def _kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(tool("kwokctl")), *args, "--name", self.name],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kwokctl {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return result

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(tool("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def install_crds(self) -> None:
        """Apply the repository's CRDs (server-side, taking over fields another manager set) and wait until every
        one is Established."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / "crds"))
        self.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=tollgate")

    def exists(self) -> bool:
        return (self.workdir / "clusters" / self.name / "kwok.yaml").exists()

    def is_ready(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0

    def up(self, nodes: int = 3, timeout: float = 180) -> float:
        """Create (or restart) the cluster and its nodes; returns seconds from start to every node Ready. With the
        real node, the images it runs are built first (make images: cached by content), outside that time."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        node_images: list[images.Built] = []
        if self.real_node:
            reason = node.unsupported_reason()
            if reason is not None:
                raise ClusterError(f"{reason}; without it, use kind with Tilt's kind mode (docs/real-node.md)")
            node_images = images.node_images()
        started = time.monotonic()
        if self.real_node:
            self.node().claim()
        if self.exists():
            if not self.is_ready():
                self._kwokctl("start", "cluster", "--timeout", f"{int(timeout)}s")
        else:
            config = self.workdir / "kwokctl.yaml"
            config.write_text(kwokctl_config(self.disable_qps_limits, self.pki_dir() if self.real_node else None))
            bins = {
                name: str(tool(name))
                for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
            }
            self._kwokctl(
                "create",
                "cluster",
                "--runtime",
                "binary",
                "--config",
                str(config),
                "--kubeconfig",
                str(self.kubeconfig),
                "--timeout",
                f"{int(timeout)}s",
                "--kube-apiserver-binary",
                bins["kube-apiserver"],
                "--kube-controller-manager-binary",
                bins["kube-controller-manager"],
                "--kube-scheduler-binary",
                bins["kube-scheduler"],
                "--etcd-binary",
                bins["etcd"],
                "--kwok-controller-binary",
                str(tool("kwok")),
            )
        self.wait_ready(timeout - (time.monotonic() - started))
        if self.real_node and not self.node().running("kubelet"):
            self.node().start(node_images, timeout - (time.monotonic() - started))
        self.ensure_nodes(nodes, timeout - (time.monotonic() - started))
        self._start_watchdog()
        return time.monotonic() - started

    def pki_dir(self) -> Path:
        """kwokctl's PKI of this cluster: ca.crt, admin.crt, admin.key."""
        return self.workdir / "clusters" / self.name / "pki"

    def node(self) -> node.RealNode:
        """The real node of this cluster (tollgate.testing.node), whether it runs or not."""
        return node.RealNode(
            self.workdir / "node",
            self.pki_dir(),
            self.kubeconfig,
            images.cache_dir() / "containerd",
            tainted=self.fake_nodes_take_pods,
        )

    @property
    def host_address(self) -> str:
        """Where pods reach a server the tests run on this machine (an xDS server, a DNS server): the real node's
        pod gateway, or loopback when pods are host processes."""
        return node.POD_GATEWAY if self.real_node else "127.0.0.1"

    def remote_address(self) -> str:
        """An address of a simulated remote node (a client's endpoint, a node that is not in this cluster), put on
        this machine: one of REMOTE_NODE_ADDRESSES on the real node's link, in turn, or one in REMOTE_CIDR."""
        if not self.real_node:
            return f"127.77.{random.randint(1, 254)}.{random.randint(1, 254)}"
        address = REMOTE_NODE_ADDRESSES[next(self._remote_addresses) % len(REMOTE_NODE_ADDRESSES)]
        self.node().add_address(address)
        return address

    def public_addresses(self, count: int = 1) -> list[str]:
        """`count` consecutive addresses for load balancers' `public-address` (a ServicePrefix's pool): beside the real
        node from PUBLIC_ADDRESSES, in turn, which its CNI plugin routes to the Envoy pod
        (tollgate.testing.public_address); else from 127.80.0.0/16, where Envoy process pods listen."""
        if not self.real_node:
            third = random.randint(1, 254)
            return [f"127.80.{third}.{host}" for host in range(1, count + 1)]
        if self._next_public + count > len(PUBLIC_ADDRESSES):
            self._next_public = 0
        start, self._next_public = self._next_public, self._next_public + count
        return list(PUBLIC_ADDRESSES[start : start + count])

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"kube-apiserver not ready after {timeout:.0f} s; logs in {self.logs_dir()} (a teardown removes "
                    f"them), their last lines:\n{self.log_tails()}"
                )
            time.sleep(0.2)
        # The default ServiceAccount appears once the controller-manager runs; pods need it.
        while self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise ClusterError("the default ServiceAccount never appeared: is kube-controller-manager running?")
            time.sleep(0.2)

    def ensure_nodes(self, count: int, timeout: float) -> None:
        manifests = [
            node_manifest(index, self.real_node, tainted=not self.fake_nodes_take_pods) for index in range(count)
        ]
        if self.real_node:
            for manifest in manifests:
                self.node().add_address(manifest["status"]["addresses"][0]["address"])
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))
        # Status given at creation is dropped by the API server: set the addresses KWOK then keeps.
        for manifest in manifests:
            self.kubectl(
                "patch",
                "node",
                manifest["metadata"]["name"],
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": manifest["status"]}),
            )
        self.kubectl("wait", "--for=condition=Ready", "node", "-l", "type=kwok", f"--timeout={max(int(timeout), 1)}s")

    def logs_dir(self) -> Path:
        return self.workdir / "clusters" / self.name / "logs"

    def log_tails(self, lines: int = 8) -> str:
        """The last lines of each component's log, for an error that outlives the cluster's teardown."""
        logs = sorted(self.logs_dir().glob("*.log")) if self.logs_dir().is_dir() else []
        return "\n".join(
            f"== {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) for log in logs
        )

    def _watchdog_pid_file(self) -> Path:
        return self.workdir / "clusters" / self.name / "watchdog.pid"

    def watchdog_pid(self) -> int | None:
        return pid_in(self._watchdog_pid_file())

    def _start_watchdog(self) -> None:
        """A detached `python -m tollgate.testing.cluster watch` for this cluster (ControlPlaneWatchdog), unless
        one runs already; it outlives `make cluster` and stops with `down`."""
        if self.watchdog_pid() is not None:
            return
        args = ["--workdir", str(self.workdir), "--name", self.name, "--kubeconfig", str(self.kubeconfig)]
        args += ["--real-node"] if self.real_node else []
        with (self.logs_dir() / "watchdog.log").open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "tollgate.testing.cluster", "watch", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._watchdog_pid_file().write_text(str(process.pid))

    def _stop_watchdog(self) -> None:
        """Before kwokctl stops the components, or the watchdog would start them again."""
        terminate(self._watchdog_pid_file(), timeout=30)
        self._watchdog_pid_file().unlink(missing_ok=True)

    def restarts(self) -> dict[str, int]:
        """How often the watchdog restarted each component, from its log (0 for the others)."""
        counts = dict.fromkeys(self.components(), 0)
        log_file = self.logs_dir() / "watchdog.log"
        for line in log_file.read_text().splitlines() if log_file.exists() else []:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line being written, or not one of the watchdog's records
                continue
            if "restarts" in record:
                counts[record["component"]] = record["restarts"]
        return counts

    def restart_exited(self, exited: list[str]) -> dict[str, int]:
        """Start again the components that exited (kwokctl starts only those whose process is gone), keeping each
        one's log of the exited run as <component>.log.1, and the real node's processes that exited (their logs
        go on); the pids of those now running."""
        node_processes = set(self._node_processes())
        restarted = {name: self.node().restart(name) for name in exited if name in node_processes}
        exited = [name for name in exited if name not in node_processes]
        if not exited:
            return restarted
        for name in exited:
            current = self.logs_dir() / f"{name}.log"
            if current.exists():
                current.replace(current.with_name(f"{name}.log.1"))
        result = self._kwokctl("start", "cluster", "--timeout", "120s", check=False)
        running = self.pids()
        if any(name not in running for name in exited):
            log.error("kwokctl start cluster failed (%d): %s", result.returncode, result.stderr[-2000:])
        return restarted | {name: running[name] for name in exited if name in running}

    def _pid_files(self) -> list[Path]:
        """One per component kwokctl started, named after its binary; left in place when the process exits."""
        return sorted((self.workdir / "clusters" / self.name / "pids").glob("*.pid"))

    def _node_processes(self) -> list[str]:
        return self.node().processes() if self.real_node and self.node().owned() else []

    def components(self) -> list[str]:
        """kwokctl's components, and the real node's processes when this cluster runs it."""
        return [pid_file.stem for pid_file in self._pid_files()] + self._node_processes()

    def pids(self) -> dict[str, int]:
        """The components running now, with their pids."""
        running = {}
        for pid_file in self._pid_files():
            content = pid_file.read_text()
            if content.isdigit() and alive(int(content)):  # empty while kwokctl writes it
                running[pid_file.stem] = int(content)
        for name in self._node_processes():
            pid = self.node().pid(name)
            if pid is not None:
                running[name] = pid
        return running

    def down(self) -> None:
        self._stop_watchdog()
        self.node().stop()
        if self.exists():
            self._kwokctl("delete", "cluster", "--kubeconfig", str(self.kubeconfig))
        self.kubeconfig.unlink(missing_ok=True)


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


def dev_dir(root: Path) -> Path:
    """The state directory of `make cluster`, `make dev` and Tilt: $TOLLGATE_DEV_DIR, else .dev in the checkout."""
    return Path(os.environ.get("TOLLGATE_DEV_DIR") or root / ".dev")


def dev_cluster(root: Path, state: Path | None = None, name: str = "tollgate") -> EmbeddedCluster:
    """The cluster of `make cluster` / `make dev`: state under the dev directory, kubeconfig beside it."""
    directory = state or dev_dir(root)
    return EmbeddedCluster(name, directory / "kwok", directory / "kubeconfig")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tollgate.testing.cluster", description="The embedded cluster.")
    parser.add_argument("action", choices=["up", "down", "status", "watch"])
    parser.add_argument("--nodes", type=int, default=3, help="KWOK's fake nodes")
    parser.add_argument("--real-node", action="store_true", help="with the real node (tollgate.testing.node)")
    parser.add_argument("--workdir", type=Path, help="the cluster's KWOK_WORKDIR (default: make cluster's)")
    parser.add_argument("--name", help="the cluster's name, with --workdir")
    parser.add_argument("--kubeconfig", type=Path, help="the cluster's kubeconfig, with --workdir")
    args = parser.parse_args(argv)
    cluster = dev_cluster(repo_root())
    if args.workdir is not None:
        cluster = EmbeddedCluster(args.name or cluster.name, args.workdir, args.kubeconfig or cluster.kubeconfig)
    cluster.real_node = args.real_node
    if args.action == "watch":
        setup_logging("cluster-watchdog")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        ControlPlaneWatchdog(cluster).run(stop)
        return 0
    if args.action == "up":
        try:
            seconds = cluster.up(args.nodes)
        except (ClusterError, node.NodeError) as error:
            print(f"make cluster: {error}", file=sys.stderr)
            return 2
        real = " and the real node" if args.real_node else ""
        print(f"cluster {cluster.name} ready in {seconds:.1f} s with {args.nodes} KWOK nodes{real}")
        print(f"  export KUBECONFIG={cluster.kubeconfig}")
        print(f"  watchdog pid {cluster.watchdog_pid()}, log {cluster.logs_dir() / 'watchdog.log'}")
        print(cluster.kubectl("get", "nodes", "-o", "wide").stdout.rstrip())
    elif args.action == "down":
        cluster.down()
        print(f"cluster {cluster.name} deleted")
    else:
        ready = cluster.is_ready()
        print(f"cluster {cluster.name}: {'ready' if ready else 'not running'}")
        return 0 if ready else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
