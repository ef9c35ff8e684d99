"""readinessProbe, livenessProbe and startupProbe: httpGet, tcpSocket and grpc against the pod IP, as the kubelet
runs them (period, timeout, initial delay, success and failure thresholds). A grpc probe calls grpc.health.v1
Health/Check in plaintext (as the kubelet does: no TLS) and passes on SERVING."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tollgate.testing.kubelet.spec import ContainerConfigError
from tollgate.testing.pods import JSON


@dataclass(frozen=True)
class Probe:
    handler: str  # "httpGet", "tcpSocket" or "grpc"
    host: str
    port: int
    path: str = "/"  # a grpc probe's service name
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    initial_delay: float = 0
    period: float = 10
    timeout: float = 1
    success_threshold: int = 1
    failure_threshold: int = 3

    @property
    def target(self) -> str:
        if self.handler == "httpGet":
            return f"{self.scheme.lower()}://{self.host}:{self.port}{self.path}"
        if self.handler == "grpc":
            return f"grpc {self.host}:{self.port} service {self.path!r}"
        return f"tcp {self.host}:{self.port}"


def container_port(port: int | str, container: JSON) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or port.isdigit():
        return int(port)
    for declared in container.get("ports", []):
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ContainerConfigError(f"container {container['name']} has no port named {port!r}")


def parse_probe(spec: JSON, container: JSON, pod_ip: str) -> Probe:
    """The probe `spec` (a readinessProbe, livenessProbe or startupProbe) of `container`, aimed at `pod_ip`."""
    timing = {
        "initial_delay": spec.get("initialDelaySeconds", 0),
        "period": spec.get("periodSeconds", 10),
        "timeout": spec.get("timeoutSeconds", 1),
        "success_threshold": spec.get("successThreshold", 1),
        "failure_threshold": spec.get("failureThreshold", 3),
    }
    if "httpGet" in spec:
        action = spec["httpGet"]
        return Probe(
            "httpGet",
            action.get("host") or pod_ip,
            container_port(action["port"], container),
            action.get("path", "/"),
            action.get("scheme", "HTTP"),
            tuple((header["name"], header["value"]) for header in action.get("httpHeaders", [])),
            **timing,
        )
    if "grpc" in spec:
        action = spec["grpc"]
        return Probe("grpc", pod_ip, int(action["port"]), action.get("service", ""), **timing)
    action = spec["tcpSocket"]
    return Probe("tcpSocket", action.get("host") or pod_ip, container_port(action["port"], container), **timing)


async def check(probe: Probe, session: aiohttp.ClientSession) -> str | None:
    """None when the probe succeeds, else why it failed. HTTP succeeds with a status in [200, 400)."""
    try:
        async with asyncio.timeout(probe.timeout):
            if probe.handler == "tcpSocket":
                _, writer = await asyncio.open_connection(probe.host, probe.port)
                writer.close()
                return None
            if probe.handler == "grpc":
                return await _grpc_check(probe)
            async with session.get(probe.target, headers=dict(probe.headers), ssl=False) as response:
                if 200 <= response.status < 400:
                    return None
                return f"HTTP probe failed with statuscode: {response.status}"
    except TimeoutError:
        return f"{probe.target}: timeout after {probe.timeout}s"
    except (OSError, aiohttp.ClientError) as error:
        return f"{probe.target}: {error}"


async def _grpc_check(probe: Probe) -> str | None:
    async with grpc.aio.insecure_channel(f"{probe.host}:{probe.port}") as channel:
        try:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=probe.path), wait_for_ready=False
            )
        except grpc.aio.AioRpcError as error:
            return f"{probe.target}: {error.code().name}: {error.details()}"
    if answer.status == health_pb2.HealthCheckResponse.SERVING:
        return None
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    return f"service unhealthy (responded with {status!r})"


class Threshold:
    """A probe's result from its consecutive outcomes: passing after successThreshold successes in a row,
    failing after failureThreshold failures in a row (`failures` counts them)."""

    def __init__(self, probe: Probe, passing: bool) -> None:
        self.probe = probe
        self.passing = passing
        self.failures = 0
        self._successes = 0

    def observe(self, ok: bool) -> bool:
        self.failures, self._successes = (0, self._successes + 1) if ok else (self.failures + 1, 0)
        if ok and self._successes >= self.probe.success_threshold:
            self.passing = True
        elif not ok and self.failures >= self.probe.failure_threshold:
            self.passing = False
        return self.passing
