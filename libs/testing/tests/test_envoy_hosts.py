"""An Envoy started with a hosts file resolves cluster names through it (c-ares reads /etc/hosts)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tollgate.testing.envoy import EnvoyProcess, with_hosts_file
from tollgate.testing.net import free_port
from tollgate.testing.wait import eventually

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare: a mount namespace"
)


def test_the_command_binds_the_hosts_file_in_a_mount_namespace() -> None:
    assert with_hosts_file(["envoy", "-c", "b.json"], Path("/state/hosts")) == [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', "/state/hosts", "envoy", "-c", "b.json",
    ]  # fmt: skip


async def test_a_strict_dns_cluster_resolves_a_service_name_from_the_hosts_file(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n127.2.0.42\ttollgate-xds.tollgate-system.svc\n")
    address = {"socket_address": {"address": "tollgate-xds.tollgate-system.svc", "port_value": 18000}}
    cluster = {
        "name": "xds",
        "type": "STRICT_DNS",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": "xds",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
        },
    }
    envoy = EnvoyProcess({"static_resources": {"clusters": [cluster]}}, admin_port=free_port(), hosts_file=hosts)
    async with envoy:

        async def resolved() -> bool:
            return "xds::127.2.0.42:18000::" in await envoy.clusters()

        await eventually(resolved, "Envoy to resolve the name through the hosts file", timeout=20)
