"""This machine's one real node: claimed by one cluster at a time (the one named in /run/tollgate-node/owner), and
torn down to the host as it was found, also after a run that was killed midway."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from tollgate.testing.node.containerd import kill_shims, remove_containers, remove_unrecorded_images
from tollgate.testing.node.host import (
    HOST_DIRS,
    HostState,
    NodeError,
    kill_pod_processes,
    remove_cgroups,
    remove_owned_chains,
    run,
    sysctl_path,
    unmount_under,
    write_sysctl,
)
from tollgate.testing.node.layout import BRIDGE, CONTAINERD_STATE, KUBELET_ROOT, NODE_LINK, STATE_DIR
from tollgate.testing.processes import pid_in, terminate
from tollgate.testing.tools import ToolsMissingError, tool

log = logging.getLogger("tollgate.testing.node")

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
    if pid_in(pids / "containerd.pid"):
        remove_containers()
        remove_unrecorded_images(containerd_root)
    terminate(pids / "containerd.pid", timeout=20)
    kill_shims()
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
