"""The real node of one cluster: its directory, and its processes (the registry, containerd, the kubelet and
kube-proxy) started, waited for, restarted with the command they were started with, and stopped."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tollgate.testing.images import Built
from tollgate.testing.net import free_port
from tollgate.testing.node.containerd import (
    REGISTRY_IMAGES,
    containerd_config,
    ctr,
    import_images,
    install_cni,
    remove_containers,
    use_registry_for_docker_hub,
)
from tollgate.testing.node.dns import COREDNS_IMAGE_NAME, DNS_NAMESPACE, dns_manifests
from tollgate.testing.node.host import NodeError, guard_api_server, prepare_network, run, unsupported_reason
from tollgate.testing.node.kubelet import kube_proxy_command, kubelet_command
from tollgate.testing.node.layout import NODE_LINK, NODE_NAME
from tollgate.testing.node.teardown import OWNER, claim_node, teardown
from tollgate.testing.processes import pid_in
from tollgate.testing.tools import tool


@dataclass
class RealNode:
    """The node's processes and files for one cluster; `directory` holds its configs, logs, pids and state."""

    directory: Path
    pki: Path  # the cluster's PKI (kwokctl's): ca.crt, admin.crt, admin.key
    kubeconfig: Path
    containerd_root: Path
    tainted: bool = False  # registers with REAL_NODE_TAINT

    def pid_file(self, name: str) -> Path:
        return self.directory / "pids" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    # ------------------------------------------------------------------ lifecycle
    def claim(self) -> None:
        """This machine's real node for this cluster (a stale one cleaned away), with its bridge and address, which
        the control plane binds: call before the cluster's components start."""
        reason = unsupported_reason()
        if reason is not None:
            raise NodeError(reason)
        claim_node(self.directory, self.containerd_root)
        for sub in ("pids", "logs", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        prepare_network()
        install_cni(self.directory, self.kubeconfig)

    def start(self, images: list[Built], timeout: float = 120) -> float:
        """containerd (images imported), kubelet, kube-proxy and cluster DNS; seconds until the node is Ready."""
        started = time.monotonic()
        guard_api_server(self.kubeconfig)
        self._start_registry(images)
        self._start_containerd()
        import_images(self.containerd_root, images)
        self._spawn("kubelet", kubelet_command(self.directory, self.pki, self.kubeconfig, self.tainted))
        self._spawn("kube-proxy", kube_proxy_command(self.directory, self.kubeconfig))
        self._wait_ready(timeout - (time.monotonic() - started))
        self._install_dns(images, timeout - (time.monotonic() - started))
        return time.monotonic() - started

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run(str(tool("kubectl")), "--kubeconfig", str(self.kubeconfig), *args, stdin=stdin)

    def _install_dns(self, images: list[Built], timeout: float) -> None:
        image = next(b.image.ref for b in images if b.image.ref.startswith(COREDNS_IMAGE_NAME + ":"))
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in dns_manifests(image)))
        self.kubectl(
            "rollout", "status", "-n", DNS_NAMESPACE, "deployment/coredns", f"--timeout={max(int(timeout), 1)}s"
        )

    def add_address(self, address: str) -> None:
        """An address of the node's link, in NODES_CIDR: KWOK's fake nodes' InternalIPs and the tests' simulated
        remote client nodes, so that what is sent there ends on this machine, never on a network beyond it."""
        run("ip", "addr", "replace", f"{address}/32", "dev", NODE_LINK)

    def _spawn(self, name: str, command: list[str]) -> int:
        """Start one of the node's processes, detached; its command is kept beside its pid file for `restart`."""
        with self.log_file(name).open("ab") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.pid_file(name).with_suffix(".command").write_text(json.dumps(command))
        self.pid_file(name).write_text(str(process.pid))
        return process.pid

    def processes(self) -> list[str]:
        """The node's processes this cluster started (containerd, kubelet, kube-proxy), running or not."""
        return sorted(path.stem for path in (self.directory / "pids").glob("*.command"))

    def restart(self, name: str) -> int:
        """Start again, with the same command, one of the node's processes that exited; its new pid."""
        command = json.loads(self.pid_file(name).with_suffix(".command").read_text())
        pid = self._spawn(name, command)
        if name == "registry":
            self._push_registry_images()
        return pid

    def _start_registry(self, images: list[Built]) -> None:
        """A local registry (`crane registry serve`, on loopback) holding the images the kubelet always pulls (a
        `latest` tag: REGISTRY_IMAGES), and containerd's hosts for docker.io pointing there instead of Docker Hub,
        so that such a pull is served on this machine and never tried beyond it."""
        port = free_port()
        self._spawn("registry", [str(tool("crane")), "registry", "serve", "--address", f"127.0.0.1:{port}"])
        pushed = {b.image.ref: str(b.tarball) for b in images if b.image.ref in REGISTRY_IMAGES}
        (self.directory / "registry-images.json").write_text(json.dumps(pushed, indent=2))
        use_registry_for_docker_hub(self.directory, f"http://127.0.0.1:{port}")
        self._push_registry_images()

    def _push_registry_images(self) -> None:
        """Push REGISTRY_IMAGES to the registry (it keeps manifests in memory: again after each of its starts)."""
        command = json.loads(self.pid_file("registry").with_suffix(".command").read_text())
        address = command[command.index("--address") + 1]
        pushed: dict[str, str] = json.loads((self.directory / "registry-images.json").read_text())
        for ref, tarball in pushed.items():
            target = f"{address}/{ref.removeprefix('docker.io/')}"
            self._wait("registry", functools.partial(self._crane, "push", "--insecure", tarball, target), 30)

    def _crane(self, *args: str) -> bool:
        return run(str(tool("crane")), *args, check=False).returncode == 0

    def _start_containerd(self) -> None:
        """containerd on its root in the cache (the images stay imported), without the containers of a run that was
        killed: a new node starts with none."""
        self.containerd_root.mkdir(parents=True, exist_ok=True)
        config = self.directory / "containerd.toml"
        config.write_text(containerd_config(self.directory, self.containerd_root))
        self._spawn("containerd", ["containerd", "--config", str(config)])
        self._wait("containerd", lambda: ctr("version", check=False).returncode == 0, 30)
        remove_containers()

    def _wait(self, what: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if not self.running(what):
                raise NodeError(f"{what} exited; the end of its log ({self.log_file(what)}):\n{self.log_tail(what)}")
            if time.monotonic() > deadline:
                raise NodeError(f"{what} not ready after {timeout:.0f} s; its log:\n{self.log_tail(what)}")
            time.sleep(0.1)

    def _wait_ready(self, timeout: float) -> None:
        def ready() -> bool:
            jsonpath = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
            result = run(
                str(tool("kubectl")),
                "--kubeconfig",
                str(self.kubeconfig),
                "get",
                "node",
                NODE_NAME,
                "-o",
                jsonpath,
                check=False,
            )
            return result.stdout.strip() == "True"

        self._wait("kubelet", ready, timeout)

    def container_pid(self, container_id: str) -> int:
        """The host PID of the main process of a container, from its ID as a pod's status gives it
        (containerd://<id>)."""
        task = container_id.removeprefix("containerd://")
        for line in ctr("task", "ls").stdout.splitlines()[1:]:
            fields = line.split()
            if fields[0] == task and fields[2] == "RUNNING":
                return int(fields[1])
        raise NodeError(f"container {task} has no running task on the node")

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.log_file(name)
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    def pid(self, name: str) -> int | None:
        return pid_in(self.pid_file(name))

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def memory(self) -> dict[str, int]:
        """Resident memory (bytes) of each of the node's processes."""
        sizes = {}
        for name in ("containerd", "kubelet", "kube-proxy"):
            pid = self.pid(name)
            if pid is not None:
                status = Path(f"/proc/{pid}/status").read_text()
                sizes[name] = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]
        return sizes

    # ------------------------------------------------------------------ teardown
    def owned(self) -> bool:
        return OWNER.exists() and json.loads(OWNER.read_text())["directory"] == str(self.directory)

    def stop(self) -> None:
        """Teardown, when this machine's real node is this cluster's (a cluster without one leaves it alone)."""
        if self.owned():
            teardown(self.directory, self.containerd_root)
