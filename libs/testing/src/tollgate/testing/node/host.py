"""The host under the real node: whether it can run one, the network the node adds to it (links, forwarding, the
iptables chains that keep pods and the API server on this machine), and the changes the node's parts make that a
teardown must undo (sysctls, iptables chains, cgroups, mounts, directories), recorded and compared."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tollgate.testing.node.layout import (
    BRIDGE,
    CNI_BIN_DIR,
    FORWARD_CHAIN,
    INPUT_CHAIN,
    NODE_IP,
    NODE_LINK,
    STATE_DIR,
)

log = logging.getLogger("tollgate.testing.node")

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
CGROUP_ROOT = Path("/sys/fs/cgroup")
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


# ------------------------------------------------------------------------------------------------------ network
def prepare_network() -> None:
    """The node's links and address, forwarding on, and the chain that keeps what the bridge forwards on it."""
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


def guard_api_server(kubeconfig: Path) -> None:
    """The API server listens on every address (pods need the node's, kwokctl's kubeconfigs name 127.0.0.1): let
    only loopback and the bridge reach its port."""
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    port = server.rpartition(":")[2]
    run("iptables", "-N", INPUT_CHAIN, check=False)
    run("iptables", "-F", INPUT_CHAIN)
    run("iptables", "-A", INPUT_CHAIN, "-i", "lo", "-j", "RETURN")
    run("iptables", "-A", INPUT_CHAIN, "-i", BRIDGE, "-j", "RETURN")
    run("iptables", "-A", INPUT_CHAIN, "-p", "tcp", "--dport", port, "-j", "DROP")
    if run("iptables", "-C", "INPUT", "-j", INPUT_CHAIN, check=False).returncode != 0:
        run("iptables", "-I", "INPUT", "1", "-j", INPUT_CHAIN)


# ---------------------------------------------------------------------------------------------- what to undo
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
