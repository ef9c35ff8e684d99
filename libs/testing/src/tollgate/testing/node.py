"""One real node beside the embedded control plane: containerd with runc, the CNI bridge plugin, a kubelet and
kube-proxy (both built from the wrapper module with the control plane), on reserved test ranges inside the machine.

    node          192.0.2.2 on the empty bridge tollgate-node (the kubelet's InternalIP; the API server listens there
                  too, for pods), reached from pods through their gateway
    pods          198.18.0.0/24 from host-local IPAM on the same bridge, gateway 198.18.0.1 (the cluster's pod
                  range is 198.18.0.0/16; KWOK's fake nodes get other /24s of it)
    Services      198.19.0.0/16 (kube-proxy, iptables mode)

A load balancer's (or GWProxy's) public address reaches its Envoy container as EPIC's Multus attachment makes it
do: the address is on the pod's own interfaces, and the host routes it to the pod (the CNI plugin
tollgate.testing.public_address, chained after the bridge).

Nothing is masqueraded and nothing is routed off the machine: forwarding is on while the node runs (a ClusterIP
is DNATed to a pod on the bridge), and the chain TOLLGATE-NODE drops whatever would be forwarded between the
bridge and any other interface.

The node changes the host (sysctls, iptables chains, cgroups, mounts, network namespaces, directories; see
`../shared/notes/real-node.md`). `HostState` records what they were before the first start in
/run/tollgate-node/, and `teardown` puts every one back, also after a run that was killed midway (the next start
finds the record and cleans up first). One real node per machine: a second cluster asking for one is refused
while the first one's processes run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tollgate.testing.images import BUSYBOX_REF, PAUSE_REF, Built
from tollgate.testing.net import free_port
from tollgate.testing.processes import pid_in, terminate
from tollgate.testing.tools import ToolsMissingError, tool

log = logging.getLogger("tollgate.testing.node")

NODE_NAME = "tollgate-node"
BRIDGE = "tollgate0"
NODE_LINK = "tollgate-node"
NODE_IP = "192.0.2.2"
NODES_CIDR = "192.0.2.0/24"
POD_CIDR = "198.18.0.0/16"
NODE_POD_CIDR = "198.18.0.0/24"
POD_GATEWAY = "198.18.0.1"
SERVICE_CIDR = "198.19.0.0/16"
CLUSTER_DNS = "198.19.0.10"
# How pods name the API server: the `kubernetes` Service's ClusterIP (the first of the range) and DNS names.
API_SERVER_SERVICE_NAMES = (
    "198.19.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
CNI_BIN_DIR = Path("/usr/lib/cni")
PUBLIC_ADDRESS_PLUGIN = "tollgate-public-address"
FORWARD_CHAIN = "TOLLGATE-NODE"
INPUT_CHAIN = "TOLLGATE-NODE-INPUT"
REAL_NODE_LABEL = "tollgate.io/node"
# What the node's local registry serves (pushed from make images' tarballs): images the kubelet always pulls.
REGISTRY_IMAGES = (BUSYBOX_REF,)
# The real node's own taint, when KWOK's nodes take the ordinary pods (EmbeddedCluster.fake_nodes_take_pods): only
# pods that tolerate it run there (REAL_NODE_PLACEMENT: the tests' Envoy pods, CoreDNS).
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "real", "effect": "NoSchedule"}
REAL_NODE_PLACEMENT = {
    "nodeSelector": {REAL_NODE_LABEL: "real"},
    "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
}

# The host settings a kubelet, the bridge plugin or kube-proxy change, restored at teardown.
SYSCTLS = (
    "net.ipv4.ip_forward",
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
# Directories the node's parts create outside its own directory whatever they are told.
HOST_DIRS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/run/containerd",
    "/var/run/netns",
    "/opt/containerd",
    "/etc/cni",
    "/opt/cni",
)
STATE_DIR = Path("/run/tollgate-node")
# Sockets and the kubelet's root under a short path of their own (a unix socket's path has at most 107 bytes; a
# test's temporary directory is longer): one real node per machine, so one fixed place.
SOCKET = STATE_DIR / "containerd.sock"
KUBELET_ROOT = STATE_DIR / "kubelet"
CONTAINERD_STATE = STATE_DIR / "containerd"
CGROUP_ROOT = Path("/sys/fs/cgroup")
IMPORTED_RECORD = "tollgate-imported.json"
OWNED_CHAIN = re.compile(r"^(KUBE-|CNI-|TOLLGATE-)")


class NodeError(RuntimeError):
    pass


def unsupported_reason() -> str | None:
    """Why this machine cannot run the real node, in one line, or None."""
    if not Path("/proc/self/mountinfo").exists() or os.uname().sysname != "Linux":
        return "the real node needs Linux"
    if os.geteuid() != 0:
        return "the real node needs root (containerd, the kubelet and the bridge change host settings)"
    missing = [
        name
        for name in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables")
        if not shutil.which(name)
    ]
    if not (CNI_BIN_DIR / "bridge").exists():
        missing.append(f"{CNI_BIN_DIR}/bridge")
    if missing:
        return f"the real node needs {', '.join(missing)}: run `make node-packages` (Debian packages, as root)"
    return None


def run(*command: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, input=stdin)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return result


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls() -> dict[str, str]:
    return {name: sysctl_path(name).read_text().strip() for name in SYSCTLS if sysctl_path(name).exists()}


def write_sysctl(name: str, value: str) -> None:
    sysctl_path(name).write_text(value)


# ---------------------------------------------------------------------------------------------------------- host
@dataclass
class HostState:
    """What the host looked like before the node's first start, kept in /run until a teardown restored it."""

    sysctls: dict[str, str]
    existing_dirs: list[str]

    path = STATE_DIR / "host-state.json"

    @classmethod
    def capture(cls) -> HostState:
        return cls(read_sysctls(), [d for d in HOST_DIRS if Path(d).exists()])

    @classmethod
    def load(cls) -> HostState | None:
        if not cls.path.exists():
            return None
        data = json.loads(cls.path.read_text())
        return cls(data["sysctls"], data["existing_dirs"])

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"sysctls": self.sysctls, "existing_dirs": self.existing_dirs}))


def host_fingerprint() -> dict[str, Any]:
    """What a teardown must leave as it found it, for a test to compare before and after."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    cgroups = sorted(
        str(path.relative_to(CGROUP_ROOT)) for path in CGROUP_ROOT.glob("*/kubepods*") if path.is_dir()
    ) + sorted(p.name for p in CGROUP_ROOT.glob("kubepods*"))
    return {
        "sysctls": read_sysctls(),
        "iptables": {binary: _rules(binary) for binary in ("iptables-save", "ip6tables-save")},
        "links": sorted(
            line.split(":")[1].strip().split("@")[0] for line in run("ip", "-o", "link").stdout.splitlines()
        ),
        "addresses": sorted(run("ip", "-br", "addr").stdout.splitlines()),
        "netns": sorted(p.name for p in Path("/var/run/netns").glob("*")) if Path("/var/run/netns").exists() else [],
        "mounts": sorted(m for m in mounts if "kubelet" in m or "containerd" in m or "netns" in m or "tollgate" in m),
        "cgroups": cgroups,
        "dirs": [d for d in HOST_DIRS if Path(d).exists()],
    }


def _rules(binary: str) -> list[str]:
    if shutil.which(binary) is None:
        return []
    listing = run(binary, check=False).stdout
    return sorted(
        line for line in listing.splitlines() if line and not line.startswith(("#", ":")) and line != "COMMIT"
    )


def remove_owned_chains() -> None:
    """Every rule jumping to a KUBE-*, CNI-* or TOLLGATE-* chain, then those chains, in every table, v4 and v6."""
    for save, restore in (("iptables-save", "iptables-restore"), ("ip6tables-save", "ip6tables-restore")):
        if shutil.which(save) is None:
            continue
        dump = run(save).stdout
        kept: list[str] = []
        for line in dump.splitlines():
            if line.startswith(":") and OWNED_CHAIN.match(line[1:]):
                continue
            if line.startswith("-A "):
                parts = line.split()
                target = parts[parts.index("-j") + 1] if "-j" in parts else ""
                if OWNED_CHAIN.match(parts[1]) or OWNED_CHAIN.match(target):
                    continue
            kept.append(line)
        if kept != dump.splitlines():
            run(restore, stdin="\n".join(kept) + "\n")


def kubepods_cgroups() -> list[Path]:
    return [p for p in [*CGROUP_ROOT.glob("*/kubepods*"), *CGROUP_ROOT.glob("kubepods*")] if p.is_dir()]


def kill_pod_processes() -> None:
    """Every process left in a pod's cgroup: a run killed with its containerd leaves the containers running."""
    for top in kubepods_cgroups():
        for procs in top.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


def remove_cgroups() -> None:
    """/kubepods (and the QoS groups under it) in every cgroup hierarchy, leaves first."""
    for top in kubepods_cgroups():
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            _rmdir_cgroup(directory)
        _rmdir_cgroup(top)


def _rmdir_cgroup(directory: Path) -> None:
    for _ in range(50):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy for a moment after its last process exited
            time.sleep(0.1)
    log.warning("cgroup %s is still busy; left in place", directory)


def unmount_under(*prefixes: str) -> None:
    """Every mount whose mount point is under one of `prefixes`, deepest first."""
    for _ in range(3):
        points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        targets = sorted(
            {p for p in points if any(p == x or p.startswith(x.rstrip("/") + "/") for x in prefixes)},
            key=len,
            reverse=True,
        )
        if not targets:
            return
        for target in targets:
            run("umount", "-l", target, check=False)


# ---------------------------------------------------------------------------------------------------------- node
@dataclass
class RealNode:
    """The node's processes and files for one cluster; `directory` holds its configs, logs, pids and state."""

    directory: Path
    pki: Path  # the cluster's PKI (kwokctl's): ca.crt, admin.crt, admin.key
    kubeconfig: Path
    containerd_root: Path
    tainted: bool = False  # registers with REAL_NODE_TAINT

    socket = SOCKET

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
        self._network()

    def start(self, images: list[Built], timeout: float = 120) -> float:
        """containerd (images imported), kubelet, kube-proxy and cluster DNS; seconds until the node is Ready."""
        started = time.monotonic()
        self._guard_api_server()
        self._start_registry(images)
        self._start_containerd()
        self._import(images)
        self._start_kubelet()
        self._start_kube_proxy()
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

    def _network(self) -> None:
        # The node's address on a link of its own (an empty bridge: this kernel has no dummy links): the bridge
        # plugin refuses a bridge with an address besides the
        # pods' gateway. Pods reach it through that gateway (a route of their IPAM).
        for link in (NODE_LINK, BRIDGE):
            if run("ip", "link", "show", link, check=False).returncode != 0:
                run("ip", "link", "add", link, "type", "bridge")
            run("ip", "link", "set", link, "up")
        run("ip", "addr", "replace", f"{NODE_IP}/32", "dev", NODE_LINK)
        write_sysctl("net.ipv4.ip_forward", "1")
        # Nothing between the bridge and another interface: pods and ClusterIPs stay on the machine.
        run("iptables", "-N", FORWARD_CHAIN, check=False)
        run("iptables", "-F", FORWARD_CHAIN)
        run("iptables", "-A", FORWARD_CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")
        run("iptables", "-A", FORWARD_CHAIN, "!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP")
        if run("iptables", "-C", "FORWARD", "-j", FORWARD_CHAIN, check=False).returncode != 0:
            run("iptables", "-I", "FORWARD", "1", "-j", FORWARD_CHAIN)
        conflist = {
            "cniVersion": "1.0.0",
            "name": "tollgate",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": NODE_POD_CIDR, "gateway": POD_GATEWAY}]],
                        # No default route: only the cluster's ranges and the nodes' (where the test's remote
                        # endpoints live, on the node's link) are reachable from a pod.
                        "routes": [{"dst": POD_CIDR}, {"dst": SERVICE_CIDR}, {"dst": NODES_CIDR}],
                        "dataDir": str(self.directory / "cni" / "ipam"),
                    },
                },
                {
                    "type": PUBLIC_ADDRESS_PLUGIN,
                    "bridge": BRIDGE,
                    "kubectl": str(tool("kubectl")),
                    "kubeconfig": str(self.kubeconfig),
                },
            ],
        }
        self._cni_bin_dir()
        (self.directory / "cni" / "net.d" / "10-tollgate.conflist").write_text(json.dumps(conflist, indent=2))

    def add_address(self, address: str) -> None:
        """An address of the node's link, in NODES_CIDR: KWOK's fake nodes' InternalIPs and the tests' simulated
        remote client nodes, so that what is sent there ends on this machine, never on a network beyond it."""
        run("ip", "addr", "replace", f"{address}/32", "dev", NODE_LINK)

    def _guard_api_server(self) -> None:
        """The API server listens on every address (pods need the node's, kwokctl's kubeconfigs name 127.0.0.1): let
        only loopback and the bridge reach its port."""
        server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        port = server.rpartition(":")[2]
        run("iptables", "-N", INPUT_CHAIN, check=False)
        run("iptables", "-F", INPUT_CHAIN)
        run("iptables", "-A", INPUT_CHAIN, "-i", "lo", "-j", "RETURN")
        run("iptables", "-A", INPUT_CHAIN, "-i", BRIDGE, "-j", "RETURN")
        run("iptables", "-A", INPUT_CHAIN, "-p", "tcp", "--dport", port, "-j", "DROP")
        if run("iptables", "-C", "INPUT", "-j", INPUT_CHAIN, check=False).returncode != 0:
            run("iptables", "-I", "INPUT", "1", "-j", INPUT_CHAIN)

    def _cni_bin_dir(self) -> None:
        """Debian's CNI plugins and the public-address plugin (tollgate.testing.public_address) in one directory."""
        bin_dir = self.directory / "cni" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for plugin in CNI_BIN_DIR.iterdir():
            link = bin_dir / plugin.name
            if not link.is_symlink():
                link.symlink_to(plugin)
        wrapper = bin_dir / PUBLIC_ADDRESS_PLUGIN
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m tollgate.testing.public_address\n")
        wrapper.chmod(0o755)

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
        hosts = self.directory / "certs.d" / "docker.io" / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        server = f"http://127.0.0.1:{port}"
        hosts.write_text(f'server = "{server}"\n\n[host."{server}"]\n  capabilities = ["pull", "resolve"]\n')
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

    def _containerd_config(self) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        state = CONTAINERD_STATE
        return "\n".join(
            [
                "version = 2",
                f'root = "{self.containerd_root}"',
                f'state = "{state}"',
                "[grpc]",
                f'  address = "{self.socket}"',
                "[ttrpc]",
                f'  address = "{self.socket}.ttrpc"',
                '[plugins."io.containerd.internal.v1.opt"]',
                f'  path = "{self.containerd_root}/opt"',
                f"[{cri}]",
                f'  sandbox_image = "{PAUSE_REF}"',
                "  restrict_oom_score_adj = true",  # without CAP_SYS_RESOURCE runc cannot lower oom_score_adj
                "  enable_unprivileged_ports = true",
                "  enable_unprivileged_icmp = true",
                "  disable_apparmor = true",
                f"[{cri}.containerd]",
                '  snapshotter = "overlayfs"',
                '  default_runtime_name = "runc"',
                f"[{cri}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"[{cri}.containerd.runtimes.runc.options]",
                "  SystemdCgroup = false",
                f'  Root = "{state}/runc"',
                f"[{cri}.registry]",
                f'  config_path = "{self.directory / "certs.d"}"',
                f"[{cri}.cni]",
                f'  bin_dir = "{self.directory / "cni" / "bin"}"',
                f'  conf_dir = "{self.directory / "cni" / "net.d"}"',
                "",
            ]
        )

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args, check=check)

    def _start_containerd(self) -> None:
        """containerd on its root in the cache (the images stay imported), without the containers of a run that was
        killed: a new node starts with none."""
        self.containerd_root.mkdir(parents=True, exist_ok=True)
        config = self.directory / "containerd.toml"
        config.write_text(self._containerd_config())
        self._spawn("containerd", ["containerd", "--config", str(config)])
        self._wait("containerd", lambda: self.ctr("version", check=False).returncode == 0, 30)
        _remove_containers(self.socket)

    def _import(self, images: list[Built]) -> None:
        """Each image's tarball into containerd, unless it holds that tarball already (its key is recorded)."""
        record = self.containerd_root / IMPORTED_RECORD
        imported: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
        present = set(self.ctr("images", "list", "--quiet").stdout.split())
        for built in images:
            ref = normalized_ref(built.image.ref)
            if imported.get(ref) == built.tarball.name and ref in present:
                continue
            began = time.monotonic()
            self.ctr("images", "import", "--no-unpack=false", str(built.tarball))
            imported[ref] = built.tarball.name
            log.info("imported %s into the node in %.1f s", ref, time.monotonic() - began)
        record.write_text(json.dumps(imported, indent=2))

    def _kubelet_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "x509": {"clientCAFile": str(self.pki / "ca.crt")},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "imageServiceEndpoint": f"unix://{self.socket}",
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": "cluster.local",
            "resolvConf": str(self.directory / "resolv.conf"),
            "podLogsDir": str(self.directory / "pod-logs"),
            # Images are imported, never pulled: collecting one would lose it.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "serializeImagePulls": False,
            "maxPods": 110,
            "syncFrequency": "10s",
            "registerWithTaints": [REAL_NODE_TAINT] if self.tainted else [],
        }

    def _start_kubelet(self) -> None:
        config = self.directory / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config()))
        # Pods resolve nothing outside the cluster: no upstream server is reachable from the bridge.
        (self.directory / "resolv.conf").write_text("options ndots:1\n")
        self._spawn(
            "kubelet",
            [
                str(tool("kubelet")),
                "--config",
                str(config),
                "--kubeconfig",
                str(self.kubeconfig),
                "--root-dir",
                str(KUBELET_ROOT),
                "--cert-dir",
                str(self.directory / "kubelet-pki"),
                "--hostname-override",
                NODE_NAME,
                "--node-ip",
                NODE_IP,
                "--node-labels",
                f"{REAL_NODE_LABEL}=real,type=real",
                "--v",
                "1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP,
            "clusterCIDR": POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # A rule change is applied at once rather than at most once a second: a Ready pod is routed sooner.
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False, "minSyncPeriod": "0s"},
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "nodePortAddresses": [f"{NODE_IP}/32"],
        }
        path = self.directory / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kube-proxy", [str(tool("kube-proxy")), "--config", str(path), "--v", "1"])

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
        for line in self.ctr("task", "ls").stdout.splitlines()[1:]:
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


def normalized_ref(ref: str) -> str:
    """A reference as containerd names it: docker.io/ for Docker Hub's, docker.io/library/ for its official images."""
    first = ref.split("/")[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{ref}"
    return ref


OWNER = STATE_DIR / "owner"


def claim_node(directory: Path, containerd_root: Path) -> None:
    """This machine's one real node for the cluster whose node directory is `directory`; a node left by a run that
    was killed is cleaned away first; a running one of another cluster refuses."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    if OWNER.exists():
        owner = json.loads(OWNER.read_text())
        other = Path(owner["directory"])
        if other != directory and any(pid_in(other / "pids" / f"{n}.pid") for n in ("kubelet", "containerd")):
            raise NodeError(
                f"this machine's real node already runs for another cluster (node directory {other}); stop that "
                "cluster first (make cluster-down, or the test session that started it)"
            )
        log.info("cleaning up the real node a previous run left (%s)", other)
        teardown(other, Path(owner["containerd_root"]))
    if HostState.load() is None:
        HostState.capture().save()
    OWNER.write_text(json.dumps({"directory": str(directory), "containerd_root": str(containerd_root)}))


def teardown(directory: Path, containerd_root: Path) -> None:
    """Stop the node's processes and every pod container, and put back every host setting it changed."""
    pids = directory / "pids"
    terminate(pids / "kubelet.pid", timeout=20)
    terminate(pids / "kube-proxy.pid", timeout=20)
    terminate(pids / "registry.pid", timeout=20)
    socket = SOCKET
    if pid_in(pids / "containerd.pid"):
        _remove_containers(socket)
        _remove_unrecorded_images(socket, containerd_root)
    terminate(pids / "containerd.pid", timeout=20)
    _kill_shims()
    kill_pod_processes()
    unmount_under(str(directory), str(STATE_DIR), "/var/run/netns", "/run/netns", "/var/lib/kubelet")
    for netns in Path("/var/run/netns").glob("cni-*") if Path("/var/run/netns").exists() else []:
        run("ip", "netns", "delete", netns.name, check=False)
    remove_cgroups()
    if shutil.which("kube-proxy") or _tool_exists("kube-proxy"):
        run(str(tool("kube-proxy")), "--cleanup", check=False)
    remove_owned_chains()
    for link in (BRIDGE, NODE_LINK):
        if run("ip", "link", "show", link, check=False).returncode == 0:
            run("ip", "link", "delete", link)
    state = HostState.load()
    if state is not None:
        for name, value in state.sysctls.items():
            if sysctl_path(name).exists() and sysctl_path(name).read_text().strip() != value:
                write_sysctl(name, value)
        for created in (d for d in HOST_DIRS if d not in state.existing_dirs):
            shutil.rmtree(created, ignore_errors=True)
    shutil.rmtree(CONTAINERD_STATE, ignore_errors=True)
    shutil.rmtree(KUBELET_ROOT, ignore_errors=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)


def _tool_exists(name: str) -> bool:
    try:
        tool(name)
    except ToolsMissingError:
        return False
    return True


def _remove_containers(socket: Path) -> None:
    """Every container of the node's containerd (the pods' and their sandboxes'), killed and deleted with its
    snapshot; the images stay."""
    ctr = ["ctr", "--address", str(socket), "--namespace", "k8s.io"]
    tasks = run(*ctr, "tasks", "list", "--quiet", check=False).stdout.split()
    for task in tasks:
        run(*ctr, "tasks", "kill", "--signal", "SIGKILL", task, check=False)
    for task in tasks:
        run(*ctr, "tasks", "delete", "--force", task, check=False)
    for container in run(*ctr, "containers", "list", "--quiet", check=False).stdout.split():
        run(*ctr, "containers", "delete", container, check=False)


def _remove_unrecorded_images(socket: Path, containerd_root: Path) -> None:
    """Images imported during the run (Tilt's builds) go with it: the root is kept between clusters, and only what
    `make images` built and the node imported at its start (recorded) stays there."""
    record = containerd_root / IMPORTED_RECORD
    kept = set(json.loads(record.read_text())) if record.exists() else set()
    ctr = ["ctr", "--address", str(socket), "--namespace", "k8s.io"]
    listing = run(*ctr, "images", "list", check=False).stdout.splitlines()[1:]  # REF TYPE DIGEST SIZE ...
    digest_of = {line.split()[0]: line.split()[2] for line in listing if len(line.split()) > 2}
    kept_digests = {digest for ref, digest in digest_of.items() if ref in kept}
    for ref, digest in digest_of.items():  # names, and the aliases the CRI adds (repo@sha256:..., sha256:<id>)
        if digest not in kept_digests:
            run(*ctr, "images", "remove", ref, check=False)


def _kill_shims() -> None:
    """containerd-shim processes of this node that outlived containerd (a killed run)."""
    needle = str(SOCKET).encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and needle in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


COREDNS_IMAGE_NAME = "localhost/tollgate/coredns"
DNS_NAMESPACE = "kube-system"
COREFILE = """.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    reload
}
"""


def dns_manifests(image: str) -> list[dict[str, Any]]:
    """Cluster DNS as kubeadm installs it (ServiceAccount, RBAC, Corefile, Deployment, the kube-dns Service at
    CLUSTER_DNS), with no upstream: names outside the cluster do not resolve, nothing is asked off the machine."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"namespace": DNS_NAMESPACE, "labels": labels}
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    probe = {"periodSeconds": 2, "failureThreshold": 3}
    container = {
        "name": "coredns",
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, **probe},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns", "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns", "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": DNS_NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", **meta},
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",
                        **REAL_NODE_PLACEMENT,
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", **meta},
            "spec": {
                "selector": labels,
                "clusterIP": CLUSTER_DNS,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]
