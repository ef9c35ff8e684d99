"""The node's containerd: its configuration (the CRI plugin, the CNI chain it runs for each pod, the hosts of its
registries), the images imported into it, and its containers and shims, removed at teardown."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tollgate.testing.images import BUSYBOX_REF, PAUSE_REF, Built
from tollgate.testing.node.host import run
from tollgate.testing.node.layout import (
    BRIDGE,
    CNI_BIN_DIR,
    CONTAINERD_STATE,
    NODE_POD_CIDR,
    NODES_CIDR,
    POD_CIDR,
    POD_GATEWAY,
    PUBLIC_ADDRESS_PLUGIN,
    SERVICE_CIDR,
    SOCKET,
)
from tollgate.testing.tools import tool

log = logging.getLogger("tollgate.testing.node")

IMPORTED_RECORD = "tollgate-imported.json"
# What the node's local registry serves (pushed from make images' tarballs): images the kubelet always pulls.
REGISTRY_IMAGES = (BUSYBOX_REF,)


def containerd_config(directory: Path, containerd_root: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    state = CONTAINERD_STATE
    return "\n".join(
        [
            "version = 2",
            f'root = "{containerd_root}"',
            f'state = "{state}"',
            "[grpc]",
            f'  address = "{SOCKET}"',
            "[ttrpc]",
            f'  address = "{SOCKET}.ttrpc"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{containerd_root}/opt"',
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
            f'  config_path = "{directory / "certs.d"}"',
            f"[{cri}.cni]",
            f'  bin_dir = "{directory / "cni" / "bin"}"',
            f'  conf_dir = "{directory / "cni" / "net.d"}"',
            "",
        ]
    )


def install_cni(directory: Path, kubeconfig: Path) -> None:
    """The node's CNI chain: the bridge plugin with host-local IPAM, then the public-address plugin."""
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
                    "dataDir": str(directory / "cni" / "ipam"),
                },
            },
            {
                "type": PUBLIC_ADDRESS_PLUGIN,
                "bridge": BRIDGE,
                "kubectl": str(tool("kubectl")),
                "kubeconfig": str(kubeconfig),
            },
        ],
    }
    _cni_bin_dir(directory)
    (directory / "cni" / "net.d" / "10-tollgate.conflist").write_text(json.dumps(conflist, indent=2))


def _cni_bin_dir(directory: Path) -> None:
    """Debian's CNI plugins and the public-address plugin (tollgate.testing.public_address) in one directory."""
    bin_dir = directory / "cni" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for plugin in CNI_BIN_DIR.iterdir():
        link = bin_dir / plugin.name
        if not link.is_symlink():
            link.symlink_to(plugin)
    wrapper = bin_dir / PUBLIC_ADDRESS_PLUGIN
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m tollgate.testing.public_address\n")
    wrapper.chmod(0o755)


def use_registry_for_docker_hub(directory: Path, server: str) -> None:
    """containerd's hosts for docker.io: `server` instead of Docker Hub."""
    hosts = directory / "certs.d" / "docker.io" / "hosts.toml"
    hosts.parent.mkdir(parents=True, exist_ok=True)
    hosts.write_text(f'server = "{server}"\n\n[host."{server}"]\n  capabilities = ["pull", "resolve"]\n')


def ctr(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("ctr", "--address", str(SOCKET), "--namespace", "k8s.io", *args, check=check)


def import_images(containerd_root: Path, images: list[Built]) -> None:
    """Each image's tarball into containerd, unless it holds that tarball already (its key is recorded)."""
    record = containerd_root / IMPORTED_RECORD
    imported: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
    present = set(ctr("images", "list", "--quiet").stdout.split())
    for built in images:
        ref = normalized_ref(built.image.ref)
        if imported.get(ref) == built.tarball.name and ref in present:
            continue
        began = time.monotonic()
        ctr("images", "import", "--no-unpack=false", str(built.tarball))
        imported[ref] = built.tarball.name
        log.info("imported %s into the node in %.1f s", ref, time.monotonic() - began)
    record.write_text(json.dumps(imported, indent=2))


def normalized_ref(ref: str) -> str:
    """A reference as containerd names it: docker.io/ for Docker Hub's, docker.io/library/ for its official images."""
    first = ref.split("/")[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{ref}"
    return ref


def remove_containers() -> None:
    """Every container of the node's containerd (the pods' and their sandboxes'), killed and deleted with its
    snapshot; the images stay."""
    tasks = ctr("tasks", "list", "--quiet", check=False).stdout.split()
    for task in tasks:
        ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
    for task in tasks:
        ctr("tasks", "delete", "--force", task, check=False)
    for container in ctr("containers", "list", "--quiet", check=False).stdout.split():
        ctr("containers", "delete", container, check=False)


def remove_unrecorded_images(containerd_root: Path) -> None:
    """Images imported during the run (Tilt's builds) go with it: the root is kept between clusters, and only what
    `make images` built and the node imported at its start (recorded) stays there."""
    record = containerd_root / IMPORTED_RECORD
    kept = set(json.loads(record.read_text())) if record.exists() else set()
    listing = ctr("images", "list", check=False).stdout.splitlines()[1:]  # REF TYPE DIGEST SIZE ...
    digest_of = {line.split()[0]: line.split()[2] for line in listing if len(line.split()) > 2}
    kept_digests = {digest for ref, digest in digest_of.items() if ref in kept}
    for ref, digest in digest_of.items():  # names, and the aliases the CRI adds (repo@sha256:..., sha256:<id>)
        if digest not in kept_digests:
            ctr("images", "remove", ref, check=False)


def kill_shims() -> None:
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
