"""EmbeddedCluster: one embedded cluster's lifecycle (kwokctl's control plane, KWOK's nodes, the real node, the
watchdog), its kubectl and logs, the addresses its tests put on this machine, and its components' pids."""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tollgate.testing import images, node
from tollgate.testing.cluster.addresses import PUBLIC_ADDRESSES, REMOTE_NODE_ADDRESSES
from tollgate.testing.cluster.kwok import kwokctl_config, node_manifest
from tollgate.testing.processes import alive, pid_in, terminate
from tollgate.testing.tools import repo_root, tool

log = logging.getLogger("tollgate.testing.cluster")


class ClusterError(RuntimeError):
    pass


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
                running = ", ".join(sorted(self.pids())) or "none"
                raise ClusterError(
                    f"the default ServiceAccount never appeared: is kube-controller-manager running? Components "
                    f"running: {running}; the last lines of their logs:\n{self.log_tails()}"
                )
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


def dev_dir(root: Path) -> Path:
    """The state directory of `make cluster`, `make dev` and Tilt: $TOLLGATE_DEV_DIR, else .dev in the checkout."""
    return Path(os.environ.get("TOLLGATE_DEV_DIR") or root / ".dev")


def dev_cluster(root: Path, state: Path | None = None, name: str = "tollgate") -> EmbeddedCluster:
    """The cluster of `make cluster` / `make dev`: state under the dev directory, kubeconfig beside it."""
    directory = state or dev_dir(root)
    return EmbeddedCluster(name, directory / "kwok", directory / "kubeconfig")
