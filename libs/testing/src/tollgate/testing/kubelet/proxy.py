"""Services, as kube-proxy's old userspace mode served them: a listener on each TCP port of each Service's
ClusterIP, forwarding every connection to a ready endpoint (pod IP, targetPort).

The client's IP is kept, as kube-proxy's iptables mode keeps it: the connection to the endpoint is made from
the client's own (loopback) address, so a server that checks who connects (tollgate-xds admits an Envoy
only from its pod's IP) sees the client pod, not this proxy.

On the embedded cluster ClusterIPs come from a loopback range (cluster.SERVICE_CIDR), which this machine can
listen on, so a client (and the API server, calling a webhook by its Service) reaches a ClusterIP like on
any cluster. Endpoints come from the pods themselves, the way the EndpointSlice controller picks them
(selected by the Service, Ready, not terminating): EndpointSlices cannot list them, since the API server
refuses loopback endpoint addresses. Pure, apart from ServiceProxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import random
from collections.abc import Awaitable, Callable, Iterable

from tollgate.testing.pods import JSON

log = logging.getLogger("tollgate.testing.kubelet.proxy")
CONNECT_TIMEOUT = 2.0
Address = tuple[str, int]
# (namespace, name) of the Service whose endpoint is the API server itself.
API_SERVICE = ("default", "kubernetes")


def is_ready(pod: JSON) -> bool:
    status = pod.get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    return ready and bool(status.get("podIP")) and not pod["metadata"].get("deletionTimestamp")


def selects(service: JSON, pod: JSON) -> bool:
    selector = service["spec"].get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    same_namespace = pod["metadata"]["namespace"] == service["metadata"]["namespace"]
    return same_namespace and bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def target_port(service_port: JSON, pod: JSON) -> int | None:
    """The pod's port for `service_port`: targetPort as a number, or the container port of that name."""
    target: int | str = service_port.get("targetPort") or service_port["port"]
    if isinstance(target, int) or target.isdigit():
        return int(target)
    for container in pod["spec"]["containers"]:
        for port in container.get("ports", []):
            if port.get("name") == target and port.get("protocol", "TCP") == service_port.get("protocol", "TCP"):
                return int(port["containerPort"])
    return None


def endpoints(service: JSON, service_port: JSON, pods: Iterable[JSON]) -> list[Address]:
    found = []
    for pod in pods:
        if selects(service, pod) and is_ready(pod) and (port := target_port(service_port, pod)) is not None:
            found.append((pod["status"]["podIP"], port))
    return sorted(found)


def cluster_ip(service: JSON) -> str | None:
    """The Service's ClusterIP when this machine can serve it (a loopback address), else None."""
    address = service["spec"].get("clusterIP")
    if not address or address == "None":
        return None
    return address if ipaddress.ip_address(address).is_loopback else None


def listeners(services: Iterable[JSON]) -> dict[Address, tuple[tuple[str, str], JSON]]:
    """(ClusterIP, port) -> ((namespace, name) of the Service, the Service's port) for every TCP port."""
    found = {}
    for service in services:
        address = cluster_ip(service)
        for port in service["spec"].get("ports") or []:
            if address is not None and port.get("protocol", "TCP") == "TCP":
                found[(address, int(port["port"]))] = (
                    (service["metadata"]["namespace"], service["metadata"]["name"]),
                    port,
                )
    return found


def client_source(peer: object) -> Address | None:
    """Where to connect to an endpoint from: the client's IP (any port) when it is a loopback address of this machine,
    else wherever the kernel picks."""
    if not isinstance(peer, tuple) or not peer:
        return None
    try:
        loopback = ipaddress.ip_address(peer[0]).is_loopback
    except ValueError:
        return None
    return (str(peer[0]), 0) if loopback else None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


class ServiceProxy:
    """The listeners of every Service's ClusterIP ports, kept in line with the Services (sync)."""

    def __init__(
        self,
        services: Callable[[], Iterable[JSON]],
        pods: Callable[[], Iterable[JSON]],
        api_server: Address,
    ) -> None:
        self._services = services
        self._pods = pods
        self._api_server = api_server
        self._servers: dict[Address, asyncio.Server] = {}
        self._routes: dict[Address, tuple[tuple[str, str], JSON]] = {}

    async def sync(self) -> None:
        self._routes = listeners(self._services())
        for address in set(self._servers) - set(self._routes):
            self._servers.pop(address).close()
        for address in set(self._routes) - set(self._servers):
            try:
                self._servers[address] = await asyncio.start_server(self._handler(address), *address)
            except OSError as error:
                log.warning("cannot serve Service %s/%s on %s:%s: %s", *self._routes[address][0], *address, error)

    def _handler(self, address: Address) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._forward(address, reader, writer)

        return handle

    def _backends(self, address: Address) -> list[Address]:
        key, port = self._routes[address]
        if key == API_SERVICE:
            return [self._api_server]
        service = next(
            (s for s in self._services() if (s["metadata"]["namespace"], s["metadata"]["name"]) == key), None
        )
        return [] if service is None else endpoints(service, port, self._pods())

    async def _forward(self, address: Address, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backends = self._backends(address) if address in self._routes else []
        random.shuffle(backends)
        source = client_source(writer.get_extra_info("peername"))
        for backend in backends:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    upstream_reader, upstream_writer = await asyncio.open_connection(*backend, local_addr=source)
            except (OSError, TimeoutError) as error:
                log.debug("%s:%s -> %s:%s failed: %s", *address, *backend, error)
                continue
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
            upstream_writer.close()
            break
        else:
            log.debug("%s:%s: no endpoint answered (%d tried)", *address, len(backends))
        writer.close()

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()
