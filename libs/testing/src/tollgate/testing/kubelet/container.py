"""The container launcher. The kubelet starts every container as

    unshare --mount --uts --propagation private -- python -m tollgate.testing.kubelet.container SPEC.json

and this, as root inside the fresh mount and UTS namespaces, builds the container's view of the filesystem,
then execs the container's process as the pod's user. Every mount lives and dies with the namespace:

1. a tmpfs at `rootfs` (a directory of the kubelet's state dir, empty on the host);
2. an overlay at rootfs/merged: the machine's / as the read-only lower layer (the "image" is this machine,
   with this checkout's venv in it), the upper layer on that tmpfs, so that mount points the pod needs
   (/etc/tollgate/webhook, /var/run/secrets/...) are created there and never on the host;
3. the machine's other mounts (/proc, /dev, /sys, ...) bound recursively at the same places;
4. for a non-root user, o+x on the directories leading to the image's files (the interpreter, the venv,
   the checkout, the podnet shim), in the upper layer only: in a real image they are world-readable,
   here they may sit under /root (mode 0700); and, as `podman run --passwd` does, /etc/passwd and
   /etc/group entries for the user and group when the machine has none (the image's Dockerfile creates
   its user; getpass.getuser(), which kopf calls, fails without one);
5. the pod's mounts (volumes, the kubelet's hosts file as /etc/hosts), targets resolved inside the new root;
   then the image's files that a volume hides (a checkout under /tmp, below the charts' /tmp emptyDir) bound
   again, read-only, on top of it;
6. the root remounted read-only for readOnlyRootFilesystem (the mounts of step 5 stay as asked);
7. chroot, chdir, and exec of setpriv (uid, gid, groups, no_new_privs, capability bounding set) -> argv.

It imports only the standard library: it runs once per container start.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import stat
import sys
from dataclasses import asdict, dataclass
from typing import Any, Literal

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
_MAX_SYMLINKS = 40


@dataclass(frozen=True)
class Mount:
    source: str  # a path on the machine
    target: str  # a path in the container
    read_only: bool = False


@dataclass(frozen=True)
class LaunchPlan:
    """How one container runs: what `python -m tollgate.testing.kubelet.container` carries out."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    hostname: str
    mounts: tuple[Mount, ...]
    uid: int
    gid: int
    groups: tuple[int, ...]
    no_new_privs: bool
    drop_capabilities: tuple[str, ...]  # ("all",) or lower-case names without the cap_ prefix
    read_only_root: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchPlan:
        return cls(
            **{
                **data,
                "argv": tuple(data["argv"]),
                "mounts": tuple(Mount(**m) for m in data["mounts"]),
                "groups": tuple(data["groups"]),
                "drop_capabilities": tuple(data["drop_capabilities"]),
            }
        )


def setpriv_argv(plan: LaunchPlan, setpriv: str = "setpriv") -> list[str]:
    argv = [setpriv, f"--reuid={plan.uid}", f"--regid={plan.gid}"]
    argv.append(f"--groups={','.join(map(str, plan.groups))}" if plan.groups else "--clear-groups")
    if plan.no_new_privs:
        argv.append("--no-new-privs")
    if plan.drop_capabilities:
        drop = "-all" if "all" in plan.drop_capabilities else ",".join(f"-{c}" for c in plan.drop_capabilities)
        argv += [f"--bounding-set={drop}", f"--inh-caps={drop}"]
    return [*argv, "--", *plan.argv]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return field.encode().decode("unicode_escape")


def top_level_mounts(mountinfo: str) -> list[str]:
    """Mount points of the mounts directly on the root mount, from /proc/self/mountinfo: binding each of
    them recursively brings every mount of the machine along."""
    entries = [line.split() for line in mountinfo.splitlines() if line.strip()]
    root_ids = {fields[0] for fields in entries if _unescape(fields[4]) == "/"}
    return [_unescape(f[4]) for f in entries if f[1] in root_ids and f[0] not in root_ids and _unescape(f[4]) != "/"]


def inside(root: str, path: str, create: Literal["dir", "file"] | None = None) -> str:
    """`path` of the container resolved under `root` (a directory on the machine), following symlinks as the
    container would (an absolute link starts again from `root`), never leaving `root`. With `create`, missing
    directories are made and the last component is made a directory or an empty file (a mount point)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current, links = root, 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current if current == root else os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            links += 1
            if links > _MAX_SYMLINKS:
                raise OSError(f"too many levels of symbolic links in {path}")
            target = os.readlink(candidate)
            current = root if target.startswith("/") else current
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        if create is not None and not os.path.exists(candidate):
            if parts or create == "dir":
                os.mkdir(candidate, 0o755)
            else:
                with open(candidate, "x"):
                    pass
        current = candidate
    return current


def account_lines(passwd: str, group: str, uid: int, gid: int) -> tuple[str, str]:
    """What /etc/passwd and /etc/group lack for `uid` and `gid` (empty strings when nothing)."""

    def known(text: str, number: int) -> bool:
        return any(line.split(":")[2:3] == [str(number)] for line in text.splitlines())

    user = "" if known(passwd, uid) else f"user{uid}:x:{uid}:{gid}::/:/usr/sbin/nologin\n"
    return user, "" if known(group, gid) else f"group{gid}:x:{gid}:\n"


def _add_account(root: str, uid: int, gid: int) -> None:
    paths = [inside(root, "/etc/passwd"), inside(root, "/etc/group")]
    texts = []
    for path in paths:
        with open(path) as file:
            texts.append(file.read())
    for path, text, line in zip(paths, texts, account_lines(texts[0], texts[1], uid, gid), strict=True):
        if line:
            with open(path, "a") as file:
                file.write(line if text.endswith("\n") or not text else "\n" + line)


def _libc_mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)

    def c(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    if libc.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source or fstype} on {target}: {os.strerror(error)}")


def shadowed(paths: list[str], mount_targets: list[str]) -> list[str]:
    """The image's files that a pod volume hides: with the checkout under /tmp, the charts' emptyDir at /tmp
    would hide the venv and the checkout, so they are bound again (read-only) on top of the volume."""

    def under(path: str, target: str) -> bool:
        target = target.rstrip("/") or "/"
        return path == target or path.startswith(target + "/") or target == "/"

    return [path for path in paths if any(under(path, target) for target in mount_targets)]


def _make_reachable(root: str, path: str) -> None:
    """o+x on each directory of the way to `path` (copied up into the overlay's upper layer)."""
    real = inside(root, path)
    steps = os.path.relpath(real, root).split(os.sep)
    for count in range(len(steps)):
        directory = os.path.join(root, *steps[:count])
        mode = os.stat(directory).st_mode
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            os.chmod(directory, stat.S_IMODE(mode) | stat.S_IXOTH)


def launch(plan: LaunchPlan, rootfs: str, reachable: list[str]) -> None:
    """Steps 1-7 of the module's docstring; does not return."""
    socket.sethostname(plan.hostname)
    with open("/proc/self/mountinfo") as mountinfo:
        host_mounts = top_level_mounts(mountinfo.read())
    _libc_mount("tmpfs", rootfs, "tmpfs", 0, "mode=0755")
    for name in ("upper", "work", "merged"):
        os.mkdir(os.path.join(rootfs, name))
    merged = os.path.join(rootfs, "merged")
    layers = f"lowerdir=/,upperdir={rootfs}/upper,workdir={rootfs}/work"
    _libc_mount("overlay", merged, "overlay", 0, layers)
    for point in host_mounts:
        _libc_mount(point, inside(merged, point), None, MS_BIND | MS_REC)
    if plan.uid != 0:
        for path in reachable:
            _make_reachable(merged, path)
        _add_account(merged, plan.uid, plan.gid)
    for mount in sorted(plan.mounts, key=lambda m: len(m.target.rstrip("/").split("/"))):
        target = inside(merged, mount.target, "dir" if os.path.isdir(mount.source) else "file")
        _libc_mount(mount.source, target, None, MS_BIND | MS_REC)
        if mount.read_only:
            _libc_mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    for path in shadowed(reachable, [mount.target for mount in plan.mounts]):
        target = inside(merged, path, "dir" if os.path.isdir(path) else "file")
        _libc_mount(path, target, None, MS_BIND | MS_REC)
        _libc_mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    inside(merged, plan.cwd, "dir")
    if plan.read_only_root:
        _libc_mount(None, merged, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    os.chroot(merged)
    os.chdir(plan.cwd)
    os.execve(setpriv, setpriv_argv(plan, setpriv), plan.env)


def main(argv: list[str]) -> int:
    with open(argv[0]) as file:
        spec = json.load(file)
    try:
        launch(LaunchPlan.from_json(spec["plan"]), spec["rootfs"], spec["reachable"])
    except OSError as error:
        print(f"tollgate kubelet: cannot start the container: {error}", file=sys.stderr)
    return 128


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
