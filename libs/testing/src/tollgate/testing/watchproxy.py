"""A proxy in front of the API server that reads what it forwards, for tests that need a watch event lost for good.

The FaultProxy passes TLS through untouched: it can cut or stall a watch, but a cut watch resumes from the last
resourceVersion its client saw and the API server sends what was missed meanwhile, so nothing is lost. This proxy
terminates TLS with a certificate of its own (the kubeconfig it writes trusts it), forwards every request to the
API server, and leaves out of every watch stream the events a test picks, as a broken proxy or an API server bug
would: the client never learns of them, and the events it does get move its resourceVersion past them.

    kubeconfig = service_account_kubeconfig(cluster, "jobs", tmp_path)   # token authentication: it passes through
    with WatchProxy(kubeconfig, tmp_path) as proxy:
        run_service("jobs", env={"TOLLGATE_JOBS_KUBECONFIG": str(proxy.kubeconfig), ...})
        proxy.drop(lambda event: event["object"]["metadata"].get("name") == "doomed")
        ...                                                  # proxy.dropped lists what was left out
        proxy.drop(None)

Client certificates cannot pass a TLS-terminating proxy: give it a kubeconfig that authenticates with a token.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from yarl import URL

from tollgate.testing.agents import certificates
from tollgate.testing.loops import LoopThread
from tollgate.testing.net import free_port

HOST = "127.0.0.1"
# Headers of one hop, not forwarded: the proxy sets its own (a streamed answer is chunked).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "host", "content-length", "transfer-encoding", "te", "trailer", "upgrade"}
)
# Longest watch event line read (aiohttp reads lines of up to twice its read buffer).
READ_BUFFER = 1 << 20
# Picks the watch events to leave out: {"type": "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK", "object": {...}}.
EventFilter = Callable[[dict[str, Any]], bool]


def _current_cluster(config: dict[str, Any]) -> dict[str, Any]:
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    cluster: dict[str, Any] = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    return cluster


def _trusting(cluster: dict[str, Any]) -> ssl.SSLContext:
    """A client TLS context that trusts the CA a kubeconfig's cluster names (as a file or inline)."""
    if "certificate-authority-data" in cluster:
        return ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return ssl.create_default_context(cafile=cluster["certificate-authority"])


class WatchProxy:
    """`with WatchProxy(kubeconfig, directory) as proxy:` serves on `proxy.url`; `proxy.kubeconfig` goes through it."""

    def __init__(self, kubeconfig: Path, directory: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = _current_cluster(config)
        self.upstream = str(cluster["server"]).rstrip("/")
        self._upstream_tls = _trusting(cluster)
        self.port = free_port(HOST)
        self.url = f"https://{HOST}:{self.port}"
        tls_dir = Path(tempfile.mkdtemp(prefix="watch-proxy-tls-", dir=directory))
        ca_file = certificates(tls_dir)
        self._serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._serving_tls.load_cert_chain(tls_dir / "tls.crt", tls_dir / "tls.key")
        for key in ("certificate-authority", "certificate-authority-data"):
            cluster.pop(key, None)
        cluster["server"] = self.url
        cluster["certificate-authority-data"] = base64.b64encode(ca_file.read_bytes()).decode()
        self.kubeconfig = directory / f"kubeconfig-via-watch-proxy-{self.port}"
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self._filter: EventFilter | None = None
        self.dropped: list[dict[str, Any]] = []  # the events left out
        self._thread = LoopThread("watch-proxy")
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    def drop(self, picks: EventFilter | None) -> None:
        """From now on leave out of every watch stream the events `picks` returns True for (None: none)."""
        self._filter = picks

    def __enter__(self) -> WatchProxy:
        self._thread.__enter__().call(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        self._thread.call(self._stop())
        self._thread.__exit__()

    async def _start(self) -> None:
        self._session = ClientSession(
            connector=TCPConnector(ssl=self._upstream_tls),
            auto_decompress=False,
            timeout=ClientTimeout(total=None),
            read_bufsize=READ_BUFFER,
        )
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._forward)
        # A client that leaves a watch ends its handler, and with it the watch it holds upstream; on exit, the watches
        # clients still hold are cut rather than waited for.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, HOST, self.port, ssl_context=self._serving_tls).start()

    async def _stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = [(name, value) for name, value in request.headers.items() if name.lower() not in HOP_BY_HOP]
        async with self._session.request(
            request.method,
            URL(self.upstream + request.raw_path, encoded=True),
            headers=headers,
            data=await request.read() or None,
            allow_redirects=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    response.headers.add(name, value)
            await response.prepare(request)
            if request.query.get("watch") in ("true", "1") and upstream.status == 200:
                async for line in upstream.content:  # the API server writes one event a line
                    if not self._left_out(line):
                        await response.write(line)
            else:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
            return response

    def _left_out(self, line: bytes) -> bool:
        picks = self._filter
        if picks is None or not line.strip():
            return False
        event = json.loads(line)
        if not picks(event):
            return False
        self.dropped.append(event)
        return True
