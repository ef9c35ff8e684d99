"""What `make tools`, `make dev` and `make dev-up` say while they work: each step with the seconds since the start,
what was cached, a line every few seconds while something slow runs, and a port that another process holds named
with that process. Run cheaply: a cache of stand-in binaries, a stand-in `go`, a fake condition."""

from __future__ import annotations

import fcntl
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import yaml

from tollgate.testing.dev.ports import busy_ports, left_behind
from tollgate.testing.dev.progress import LogFollower, Progress
from tollgate.testing.tools import repo_root, versions
from tollgate.testing.wait import wait_for

ROOT = repo_root()
TOOLS = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "etcd",
    "kubelet",
    "kube-proxy",
    "kwok",
    "kwokctl",
    "helm",
    "coredns",
    "crane",
]
SYSTEM_PATH = "/usr/bin:/bin"  # without Go, and without the tools cache
TOOLS_LINE = re.compile(r"^tools: \[ *\d+ s\] ")


def tools_cache(tmp_path: Path, missing: tuple[str, ...] = ()) -> Path:
    """A tools cache holding stand-ins for every binary but `missing`; returns its bin directory."""
    bin_dir = tmp_path / "cache" / "tollgate" / versions()["K8S_VERSION"] / "bin"
    bin_dir.mkdir(parents=True)
    for name in [*TOOLS, "tilt"]:
        if name not in missing:
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
    return bin_dir


def run_tools(tmp_path: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_BINARY")}
    environ |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": path, **env}
    return subprocess.run(
        [str(ROOT / "hack" / "tools.sh")], capture_output=True, text=True, env=environ, timeout=60, check=False
    )


def test_make_jaeger_builds_only_jaeger_and_a_second_run_finds_it(tmp_path: Path) -> None:
    """`hack/tools.sh jaeger` (make jaeger, and make test in the background) looks at Jaeger alone; built at the pinned
    version it does nothing."""
    bin_dir = tools_cache(tmp_path)
    (bin_dir / "jaeger").write_text("#!/bin/sh\n")
    (bin_dir / "jaeger").chmod(0o755)
    (bin_dir / "jaeger.version").write_text(versions()["JAEGER_VERSION"] + "\n")
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_BINARY")}
    environ |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": SYSTEM_PATH}
    command = [str(ROOT / "hack" / "tools.sh"), "jaeger"]
    result = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{bin_dir}\n"
    lines = result.stderr.splitlines()
    assert f"jaeger {versions()['JAEGER_VERSION']} in {bin_dir}" in lines[0], lines
    assert re.search(r"\] ready: 1 cached \(jaeger\), 0 built or installed, in \d+ s$", lines[-1]), lines


def test_make_tools_says_what_it_found_cached(tmp_path: Path) -> None:
    bin_dir = tools_cache(tmp_path)
    result = run_tools(tmp_path, SYSTEM_PATH)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{bin_dir}\n", "stdout is the bin directory only"
    lines = result.stderr.splitlines()
    assert all(TOOLS_LINE.match(line) for line in lines), lines
    assert f"control-plane binaries for Kubernetes {versions()['K8S_VERSION']} in {bin_dir}" in lines[0]
    assert len(lines) == 2, "a warm run says where, and what it found"
    everything = " ".join([*TOOLS, "tilt"])
    assert re.search(
        rf"\] ready: {len(TOOLS) + 1} cached \({everything}\), 0 built or installed, in \d+ s$", lines[-1]
    ), lines


def test_make_tools_says_what_it_installs_and_that_it_is_still_at_it(tmp_path: Path) -> None:
    bin_dir = tools_cache(tmp_path, missing=("helm",))
    fake = tmp_path / "fake-go"
    fake.mkdir()
    # A `go install` that takes about three seconds: the time it takes is the point of the test.
    (fake / "go").write_text('#!/bin/sh\nsleep 3\nprintf "#!/bin/sh\\n" > "$GOBIN/helm"\nchmod +x "$GOBIN/helm"\n')
    (fake / "go").chmod(0o755)
    result = run_tools(tmp_path, f"{fake}:{SYSTEM_PATH}", TOLLGATE_TOOLS_TICK="1")
    assert result.returncode == 0, result.stderr
    assert (bin_dir / "helm").exists()
    lines = result.stderr.splitlines()
    assert all(TOOLS_LINE.match(line) for line in lines), lines
    helm = f"helm.sh/helm/v3/cmd/helm@{versions()['HELM_VERSION']}"
    assert any(line.endswith(f"] helm: installing {helm} (go install: downloads and builds, a few minutes cold)")
               for line in lines)  # fmt: skip
    assert [line for line in lines if re.search(r"\] still installing helm \(\d+ s\)$", line)], lines
    assert any(re.search(r"\] done installing helm in \d+ s$", line) for line in lines), lines
    assert lines[-1].split("] ")[1].startswith(f"ready: {len(TOOLS)} cached (kube-apiserver "), lines[-1]
    assert "helm" not in lines[-1] and ", 1 built or installed" in lines[-1]


def test_make_tools_without_go_says_what_it_cannot_build_and_how_to_get_past_it(tmp_path: Path) -> None:
    tools_cache(tmp_path, missing=("kwok",))
    result = run_tools(tmp_path, SYSTEM_PATH)
    assert result.returncode == 3
    assert "cannot build kwok: no go on PATH. Install Go 1.21 or newer (https://go.dev/dl" in result.stderr
    assert "KUBE_APISERVER_BINARY=..." in result.stderr


def test_the_dev_waiter_says_what_it_is_still_waiting_for() -> None:
    out = io.StringIO()
    progress = Progress(tick=0.1, out=out)
    ready = threading.Event()
    timer = threading.Timer(0.5, ready.set)
    timer.start()
    assert progress.wait_for(ready.is_set, "the fake condition", timeout=10) is True
    progress.say("after\nthe wait")
    lines = out.getvalue().splitlines()
    assert all(Progress.PREFIX.match(line) for line in lines), lines
    waiting = [line for line in lines if re.search(r"\] still waiting for the fake condition \(\d s\)$", line)]
    assert len(waiting) >= 2, lines
    assert [line.split("] ", 1)[1] for line in lines[-2:]] == ["after", "the wait"]
    seconds = [float(line[1:].split(" s]")[0]) for line in lines]
    assert seconds == sorted(seconds) and seconds[-1] >= 0.5


def test_the_dev_waiter_is_quiet_when_the_condition_already_holds() -> None:
    out = io.StringIO()
    assert Progress(tick=0.1, out=out).wait_for(lambda: "yes", "something", timeout=1) == "yes"
    assert out.getvalue() == ""


def test_busy_ports_names_the_process_that_holds_one() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        lines = busy_ports({port: "webhook health"})
    assert len(lines) == 1
    assert lines[0].startswith(f"port {port} (webhook health) is in use by pid {os.getpid()} (")
    assert "pytest" in lines[0], "with its command line"
    assert busy_ports({port: "webhook health"}) == [], "free once closed"


def test_make_dev_refuses_to_start_when_a_port_is_taken(tmp_path: Path) -> None:
    """A checkout whose local system names a port this test holds: make dev says so and starts nothing."""
    (tmp_path / "hack").mkdir()
    shutil.copy(ROOT / "hack" / "versions.env", tmp_path / "hack")
    (tmp_path / "deploy" / "local").mkdir(parents=True)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        resources = [{"name": "cluster", "step": "cluster"}, {"name": "webhook", "module": "tollgate.webhook",
                      "health": port, "after": ["cluster"]}]  # fmt: skip
        (tmp_path / "deploy" / "local" / "resources.yaml").write_text(yaml.safe_dump({"resources": resources}))
        environ = os.environ | {"TOLLGATE_DEV_DIR": str(tmp_path / "dev")}
        for action in ("run", "up"):
            result = subprocess.run(
                [sys.executable, "-m", "tollgate.testing.dev", action],
                cwd=tmp_path,
                env=environ,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 1, result.stderr
            assert f"make dev: port {port} (webhook health) is in use by pid {os.getpid()} (" in result.stderr
            assert "`make dev-down`" in result.stderr
    assert not (tmp_path / "dev" / "kwok").exists(), "no cluster was started"
    assert not (tmp_path / "dev" / "dev.pid").exists(), "nothing was started detached"


def test_make_dev_up_follows_whole_lines_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "dev.log"
    log.write_text("an earlier run\n")
    follower = LogFollower(log)
    assert follower.new_lines() == []
    with log.open("a") as out:
        out.write("[   0.1 s] cluster    starting\n[   2.0 s] still wait")
    assert follower.new_lines() == ["[   0.1 s] cluster    starting"]
    with log.open("a") as out:
        out.write("ing for the cluster (2 s)\n")
    assert follower.new_lines() == ["[   2.0 s] still waiting for the cluster (2 s)"]


LISTENER = """import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
server.accept()
"""


def listener(tmp_path: Path, module: str) -> tuple[subprocess.Popen[str], int]:
    """A process listening on a port, run as `python -m <module>`; module may be in the tollgate namespace."""
    package, _, name = module.rpartition(".")
    directory = tmp_path.joinpath(*package.split(".")) if package else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(LISTENER)
    environ = os.environ | {"PYTHONPATH": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", module], stdout=subprocess.PIPE, text=True, env=environ)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def test_make_dev_down_finds_the_services_a_killed_make_dev_left_and_nothing_else(tmp_path: Path) -> None:
    ours, our_port = listener(tmp_path, "tollgate.leftover")
    theirs, their_port = listener(tmp_path, "someone_elses")
    try:
        found = left_behind({our_port: "webhook health", their_port: "xds ads"})
    finally:
        for process in (ours, theirs):
            process.kill()
            process.wait()
    assert found == {ours.pid: f"{sys.executable} -m tollgate.leftover"}


def test_a_second_make_tools_waits_for_the_first_and_says_so(tmp_path: Path) -> None:
    bin_dir = tools_cache(tmp_path)
    lock = bin_dir.parent / "tools.lock"
    (bin_dir.parent / "tools.lock.pid").write_text("4242\n")
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a first make tools holds it while it builds
        environ = {k: v for k, v in os.environ.items() if not k.endswith("_BINARY")}
        environ |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": SYSTEM_PATH, "TOLLGATE_TOOLS_TICK": "1"}
        second = subprocess.Popen(
            [str(ROOT / "hack" / "tools.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
        )
        assert second.stderr is not None
        waiting = [second.stderr.readline() for _ in range(3)]  # where, then at least two reminders
        assert second.poll() is None, "it waits while the lock is held"
    out, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert f"waiting for another make tools (pid 4242) to finish with {bin_dir} (1 s)" in waiting[1], waiting
    assert f"done waiting for another make tools (pid 4242) to finish with {bin_dir}" in err
    assert f"ready: {len(TOOLS) + 1} cached" in err
    assert out == f"{bin_dir}\n"


def test_a_jaeger_build_does_not_hold_up_make_tools(tmp_path: Path) -> None:
    """make test builds Jaeger in the background while its next steps (charts, the e2e suite) run make tools."""
    bin_dir = tools_cache(tmp_path)
    slow_go = tmp_path / "go-bin" / "go"
    slow_go.parent.mkdir()
    started = tmp_path / "jaeger-build-started"
    slow_go.write_text(f"#!/bin/sh\ntouch {started}\nsleep 20\nexit 1\n")  # a long build, as Jaeger's cold one
    slow_go.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_BINARY")}
    environ |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": f"{slow_go.parent}:{SYSTEM_PATH}"}
    jaeger = subprocess.Popen(
        [str(ROOT / "hack" / "tools.sh"), "jaeger"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environ,
        start_new_session=True,  # its stand-in go and its ticker are killed with it, below
    )
    try:
        wait_for(started.exists, "the Jaeger build to start", timeout=15)
        tools = subprocess.run(
            [str(ROOT / "hack" / "tools.sh")], capture_output=True, text=True, env=environ, timeout=15, check=False
        )
        assert jaeger.poll() is None, "the Jaeger build still runs"
    finally:
        os.killpg(jaeger.pid, signal.SIGKILL)
        jaeger.wait()
    assert tools.returncode == 0, tools.stderr
    assert "waiting" not in tools.stderr
    assert tools.stdout == f"{bin_dir}\n"
