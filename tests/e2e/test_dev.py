"""`make dev`: the whole system comes up on its own cluster with the real node and proves the data path through
Envoy containers; a service that crashes is started again; stopping leaves nothing."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tollgate.cli.epicctl import main
from tollgate.cli.exits import Exit
from tollgate.testing.agents import read_token
from tollgate.testing.dev import LB_CLIENT_NODE, DevSystem
from tollgate.testing.epicrest import EpicREST, bearer
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for


@pytest.fixture
def system(tmp_path: Path) -> DevSystem:
    return DevSystem(repo_root(), state=tmp_path / "dev")


def tunnel_of(summary: str, load_balancer: str, node: str) -> str | None:
    """The tunnel line of a load balancer's client node in the summary."""
    return next((line for line in summary.splitlines() if load_balancer in line and f" {node} " in line), None)


def programmed_summary(system: DevSystem) -> Callable[[], str | None]:
    """The summary once the proof is Programmed and both samples' client nodes have their tunnels."""

    def probe() -> str | None:
        text = system.summary()
        proof = next((line for line in text.splitlines() if "tollgate-dev/dev-proof" in line), "")
        nodes = (("epic-root/sample-acnodal", "192.168.1.30"), ("epic-root/dev-public", LB_CLIENT_NODE))
        return text if "Programmed=True" in proof and all(tunnel_of(text, *n) for n in nodes) else None

    return probe


def crash_and_recover(system: DevSystem, name: str) -> str:
    """SIGKILL the service, wait until it is running again (a new pid, /readyz ok); the summary then."""
    service = system.processes[name]
    assert service.process is not None
    crashed = service.process.pid
    os.kill(crashed, signal.SIGKILL)
    wait_for(
        lambda: service.process is not None and service.process.pid != crashed,
        f"{name} to be started again after a SIGKILL",
        timeout=30,
    )
    service.wait_ready(timeout=60)
    return system.summary()


def every_envoy_synced(system: DevSystem) -> Callable[[], list[str] | None]:
    """The Envoys `epicctl proxy-status` shows, as an operator runs it on `make dev`, once every one is SYNCED."""

    def probe() -> list[str] | None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["proxy-status", "--xds-url", system.xds_debug_url, "-o", "json",
                         "--kubeconfig", str(system.cluster.kubeconfig)])  # fmt: skip
        envoys = json.loads(out.getvalue()) if code == Exit.OK else []
        states = [{t["state"] for t in e["types"].values()} for e in envoys]
        return [e["name"] for e in envoys] if envoys and all(s <= {"SYNCED", "NOT SENT"} for s in states) else None

    return probe


def samples_completed(system: DevSystem) -> Callable[[], dict[str, str] | None]:
    """The samples' Goops by name, once each one's phase is Completed."""

    def probe() -> dict[str, str] | None:
        listing = system.cluster.kubectl("get", "goops", "-n", "default", "-o", "json", check=False)
        items = json.loads(listing.stdout)["items"] if listing.returncode == 0 else []
        phases = {g["metadata"]["name"]: (g.get("status") or {}).get("phase", "") for g in items}
        return phases if phases and set(phases.values()) == {"Completed"} else None

    return probe


def test_dev_system_runs_everything_and_carries_traffic(system: DevSystem) -> None:
    try:
        system.start()
        summary = wait_for(programmed_summary(system), "the dev-proof VirtualService to be Programmed", timeout=30)
        synced = wait_for(every_envoy_synced(system), "epicctl proxy-status to show every Envoy SYNCED", timeout=60)
        # The samples' Goops run busybox (always pulled: the node's registry serves it) on the real node.
        goops = wait_for(samples_completed(system), "the samples' Goops to complete", timeout=90)
        rest = EpicREST(
            system.resource("allocator").endpoints["rest"],
            system.dev_dir / "allocator" / "ca.crt",
            bearer(read_token(system.dev_dir / "allocator" / "root.token")),
        )
        group = rest.get("/api/epic/accounts/root/groups/dev-public")
        after_crash = crash_and_recover(system, "jobs")
    finally:
        processes = list(system.processes.values())
        system.stop()
        system.cluster.down()
    assert "dev-proxy.tollgate-dev" in synced, synced
    assert sorted(goops) == ["goop-per-node", "goop-sample"], goops
    assert f"epicctl proxy-status --xds-url {system.xds_debug_url}" in summary, summary
    for service in ("webhook", "allocator", "xds", "routedip", "jobs"):
        assert f"  {service:<10} ready  restarts 0" in summary, summary
    assert "  jobs       ready  restarts 1" in after_crash, after_crash
    assert "  kube-scheduler           pid " in after_crash, "the control plane is listed"
    assert "  xds        ready  restarts 0" in after_crash, after_crash
    logs = system.dev_dir / "logs"
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith("jobs")) == ["jobs.log"]
    assert (logs / "jobs.log").read_text().count('"message": "started"') == 2, "both runs of jobs log to jobs.log"
    assert "'udp-echo:datagram from make dev'" in summary
    assert "'tcp-echo:stream from make dev'" in summary
    assert "(ServicePrefix dev) -> Envoy -> 'lb-echo:datagram to a public address'" in summary
    assert "  LB   192.0.2.225:7003" in summary, "the first address of the dev pool"
    # The LB's endpoint was registered as an agent registers it: over TLS, with root's token minted by epicctl.
    token_file = system.dev_dir / "allocator" / "root.token"
    assert f"CA {system.dev_dir / 'allocator' / 'ca.crt'}  root's token {token_file}" in summary, summary
    assert token_file.stat().st_mode & 0o777 == 0o600
    # EPIC's REST API beside it, on the same certificate and with the same token.
    assert f"  https://{system.resource('allocator').endpoints['rest']}/api/epic" in summary, summary
    assert group.status == 200 and group.body["link"]["self"] == "/api/epic/accounts/root/groups/dev-public", group
    assert "registration API serves plaintext" not in (logs / "allocator.log").read_text()
    tunnels = {tunnel_of(summary, *n) for n in (("sample-acnodal", "192.168.1.30"), ("dev-public", LB_CLIENT_NODE))}
    assert len({line.split("tunnel ")[1] for line in tunnels if line}) == 2, f"two nodes, two tunnel IDs: {tunnels}"
    assert len(processes) == 5
    assert [p.process.returncode for p in processes if p.process is not None] == [0] * 5, (
        "a service did not stop cleanly"
    )
    assert not system.cluster.exists()
    assert not system.cluster.node().owned(), "the real node is torn down with the cluster"
