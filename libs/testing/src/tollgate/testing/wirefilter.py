"""An HTTP proxy in front of the API server that drops chosen watch events on their way to a service: an event lost
for good, the way a watch loses one when it comes back after `410 Gone` (kopf lists again then and reports what it
lists, never what was deleted meanwhile). Listings and every other request pass untouched, so a service that lists
again (a resync) can still learn what its watch never told.

    with WireFilter(service_account_kubeconfig(cluster, "routedip", tmp_path), tmp_path) as wire:
        wire.drop(lambda event: event["type"] == "DELETED")
        run_service("routedip", env={"KUBECONFIG": str(wire.kubeconfig), ...})

The service talks plain HTTP to the proxy on loopback, with its kubeconfig's token (only a token: the proxy forwards
the Authorization header, no client certificate); the proxy talks HTTPS to the API server, verifying it with the
kubeconfig's CA. The proxy runs its own event loop in a thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from tollgate.testing.net import free_port

Event = dict[str, Any]
FORWARDED_HEADERS = ("Authorization", "Content-Type", "Accept", "User-Agent")
# A watch event is one line of JSON: a large object (a pod with many containers) makes a long one.
LINE_LIMIT = 2**24


def _current_cluster(config: dict[str, Any]) -> dict[str, Any]:
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    cluster: dict[str, Any] = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    return cluster


class WireFilter:
    def __init__(self, kubeconfig: Path, directory: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = _current_cluster(config)
        self.upstream = str(cluster["server"]).rstrip("/")
        self._ssl = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            self._ssl.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            self._ssl.load_verify_locations(cafile=cluster["certificate-authority"])
        self.port = free_port()
        for key in ("certificate-authority", "certificate-authority-data"):
            cluster.pop(key, None)
        cluster["server"] = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = directory / f"kubeconfig-filtered-{self.port}"
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.dropped: list[Event] = []
        self._drop: Callable[[Event], bool] = lambda _: False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wire-filter", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def drop(self, predicate: Callable[[Event], bool]) -> None:
        """From now on, drop every watch event (`{"type": ..., "object": ...}`) for which `predicate` is true, on
        every watch, resumed ones included; the dropped events are kept in `dropped`."""
        self._drop = predicate

    def __enter__(self) -> WireFilter:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), read_bufsize=LINE_LIMIT)
        app = web.Application(client_max_size=LINE_LIMIT)
        app.router.add_route("*", "/{path:.*}", self._forward)
        # Stopping cuts the watches still open rather than waiting for them to end.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
        body = await request.read()
        async with self._session.request(
            request.method,
            f"{self.upstream}{request.path_qs}",
            headers=headers,
            data=body or None,
            ssl=self._ssl,
            # The kubernetes client sends some bodies without a Content-Type, which the API server reads as JSON;
            # aiohttp's default for bytes, application/octet-stream, it refuses.
            skip_auto_headers=() if "Content-Type" in headers else ("Content-Type",),
        ) as upstream:
            content_type = upstream.headers.get("Content-Type", "application/json")
            if request.query.get("watch") not in ("true", "1") or upstream.status != 200:
                payload = await upstream.read()
                return web.Response(status=upstream.status, body=payload, headers={"Content-Type": content_type})
            response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError):  # the service gave the watch up
                async for line in upstream.content:
                    if line.strip() and self._dropped(line):
                        continue
                    await response.write(line)
                await response.write_eof()
            return response

    def _dropped(self, line: bytes) -> bool:
        event: Event = json.loads(line)
        if not self._drop(event):
            return False
        self.dropped.append(event)
        return True
