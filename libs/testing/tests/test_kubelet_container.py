"""The container launcher: the pure parts, then a real launch in fresh namespaces (as root)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tollgate.testing.kubelet.container import (
    LaunchPlan,
    Mount,
    account_lines,
    inside,
    setpriv_argv,
    shadowed,
    top_level_mounts,
)
from tollgate.testing.kubelet.spec import POD_IP_VARIABLE
from tollgate.testing.tools import ToolsMissingError, tool

PLAN = LaunchPlan(
    argv=("python", "-m", "svc"),
    env={"PATH": "/usr/bin:/bin"},
    cwd="/",
    hostname="pod-a",
    mounts=(Mount("/state/v", "/etc/app", read_only=True),),
    uid=10001,
    gid=10001,
    groups=(10001, 5),
    no_new_privs=True,
    drop_capabilities=("all",),
    read_only_root=True,
)
root_only = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare: namespaces and mounts"
)


def test_the_plan_survives_json_and_becomes_a_setpriv_command() -> None:
    assert LaunchPlan.from_json(PLAN.to_json()) == PLAN
    assert setpriv_argv(PLAN) == [
        "setpriv", "--reuid=10001", "--regid=10001", "--groups=10001,5", "--no-new-privs",
        "--bounding-set=-all", "--inh-caps=-all", "--", "python", "-m", "svc",
    ]  # fmt: skip
    plain = LaunchPlan(("x",), {}, "/", "h", (), 0, 0, (), False, ("net_raw", "chown"), False)
    assert setpriv_argv(plain) == [
        "setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--bounding-set=-net_raw,-chown",
        "--inh-caps=-net_raw,-chown", "--", "x",
    ]  # fmt: skip


def test_the_machines_top_level_mounts() -> None:
    mountinfo = (
        "22 27 0:21 / /proc rw - proc proc rw\n"
        "24 27 0:6 / /dev rw - devtmpfs devtmpfs rw\n"
        "25 24 0:23 / /dev/shm rw - tmpfs tmpfs rw\n"
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n"
        "28 27 0:25 / /mnt/with\\040space ro - tmpfs t ro\n"
    )
    assert top_level_mounts(mountinfo) == ["/proc", "/dev", "/mnt/with space"]


def test_paths_resolve_inside_the_root_whatever_the_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # absolute: inside the root, not the machine's /run
    (root / "escape").symlink_to("../../..")
    target = inside(str(root), "/var/run/secrets/kubernetes.io/serviceaccount", "dir")
    assert target == str(root / "run" / "secrets" / "kubernetes.io" / "serviceaccount")
    assert Path(target).is_dir()
    assert inside(str(root), "/escape/etc/hosts") == str(root / "etc" / "hosts")
    assert Path(inside(str(root), "/etc/hosts", "file")).is_file()


def test_accounts_are_added_only_when_missing() -> None:
    passwd, group = "root:x:0:0::/root:/bin/sh\n", "root:x:0:\n"
    assert account_lines(passwd, group, 0, 0) == ("", "")
    assert account_lines(passwd, group, 10001, 10001) == (
        "user10001:x:10001:10001::/:/usr/sbin/nologin\n",
        "group10001:x:10001:\n",
    )


@root_only
def test_a_container_sees_its_mounts_hosts_and_user_and_leaves_nothing_on_the_machine(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "rootfs").mkdir(parents=True)
    volume = state / "volume"
    volume.mkdir()
    (volume / "greeting").write_text("hello")
    hosts = state / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n127.2.0.9\tapp.ns.svc\n")
    script = (
        "import os, socket; "
        "print(os.getuid(), os.getgid(), socket.gethostname(), socket.gethostbyname('app.ns.svc'), "
        "open('/etc/kubelet-test/app/greeting').read(), os.access('/', os.W_OK), os.access('/scratch', os.W_OK))"
    )
    plan = LaunchPlan(
        argv=(sys.executable, "-c", script),
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        hostname="pod-a",
        mounts=(
            Mount(str(volume), "/etc/kubelet-test/app", read_only=True),
            Mount(str(state / "scratch"), "/scratch"),
            Mount(str(hosts), "/etc/hosts", read_only=True),
        ),
        uid=10001,
        gid=10001,
        groups=(),
        no_new_privs=True,
        drop_capabilities=("all",),
        read_only_root=True,
    )
    (state / "scratch").mkdir(mode=0o777)
    (state / "scratch").chmod(0o777)
    spec = state / "launch.json"
    spec.write_text(
        json.dumps({"plan": plan.to_json(), "rootfs": str(state / "rootfs"), "reachable": [sys.executable, sys.prefix]})
    )
    command = ["unshare", "--mount", "--uts", "--propagation", "private", "--"]
    result = subprocess.run(
        [*command, sys.executable, "-m", "tollgate.testing.kubelet.container", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["10001", "10001", "pod-a", "127.2.0.9", "hello", "False", "True"]
    assert not Path("/etc/kubelet-test").exists()  # the mount point was made in the overlay, not here
    assert list((state / "rootfs").iterdir()) == []  # the tmpfs went with the namespace
    assert socket.gethostname() != "pod-a"


def test_podnet_binds_the_wildcard_and_loopback_addresses_to_the_pod_ip() -> None:
    try:
        podnet = tool("libpodnet.so")
    except ToolsMissingError as error:
        pytest.skip(str(error))
    script = (
        "import socket\n"
        "v4 = socket.socket(); v4.bind(('0.0.0.0', 0))\n"
        "v6 = socket.socket(socket.AF_INET6); v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
        "v6.bind(('::', 0))\n"
        "local = socket.socket(); local.bind(('127.0.0.1', 0))\n"
        "local6 = socket.socket(socket.AF_INET6); local6.bind(('::ffff:127.0.0.1', 0))\n"
        "own = socket.socket(); own.bind(('127.0.0.5', 0))\n"
        "print(*(s.getsockname()[0] for s in (v4, v6, local, local6, own)))\n"
    )
    env = {"LD_PRELOAD": str(podnet), POD_IP_VARIABLE: "127.1.9.9", "PATH": os.environ["PATH"]}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["127.1.9.9", "::ffff:127.1.9.9", "127.1.9.9", "::ffff:127.1.9.9", "127.0.0.5"]


def test_image_files_under_a_volume_are_bound_again_and_no_others() -> None:
    reachable = ["/tmp/ci/main", "/tmp/ci/main/.venv", "/root/.pyenv/versions/3.11.7/bin/python3.11", "/tmpx/a"]
    assert shadowed(reachable, ["/tmp", "/etc/hosts"]) == ["/tmp/ci/main", "/tmp/ci/main/.venv"]
    assert shadowed(reachable, ["/etc/tollgate/webhook"]) == []
