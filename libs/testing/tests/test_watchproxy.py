"""The watch proxy in front of a fake API server: requests pass as they were sent, and only the watch events a test
picks are left out."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import ClientSession, TCPConnector, web

from tollgate.testing.agents import certificates
from tollgate.testing.net import free_port
from tollgate.testing.watchproxy import WatchProxy

TOKEN = "secret-token"


def thing(name: str) -> dict[str, Any]:
    return {"kind": "Thing", "metadata": {"namespace": "ns", "name": name, "resourceVersion": "1"}}


EVENTS = [
    {"type": "ADDED", "object": thing("doomed")},
    {"type": "ADDED", "object": thing("kept")},
    {"type": "DELETED", "object": thing("doomed")},
    {"type": "BOOKMARK", "object": {"kind": "Thing", "metadata": {"resourceVersion": "9"}}},
]


async def _things(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        return web.json_response({"code": 401}, status=401)
    if request.query.get("watch") != "true":
        return web.json_response({"items": [thing("kept")], "method": request.method, "body": await request.text()})
    response = web.StreamResponse()
    await response.prepare(request)
    for event in EVENTS:
        await response.write(json.dumps(event).encode() + b"\n")
    await response.write_eof()
    return response


@pytest.fixture
async def api_server(tmp_path: Path) -> AsyncIterator[Path]:
    """A fake API server over TLS; the kubeconfig that reaches it with a token."""
    ca_file = certificates(tmp_path / "upstream")
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(tmp_path / "upstream" / "tls.crt", tmp_path / "upstream" / "tls.key")
    app = web.Application()
    app.router.add_route("*", "/api/v1/things", _things)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=serving).start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    yield kubeconfig
    await runner.cleanup()


def _client(proxy: WatchProxy) -> ClientSession:
    """A client as the kubeconfig through the proxy makes it: the proxy's CA, the token."""
    cluster = yaml.safe_load(proxy.kubeconfig.read_text())["clusters"][0]["cluster"]
    trusted = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return ClientSession(
        base_url=cluster["server"],
        connector=TCPConnector(ssl=trusted),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


async def _watch(client: ClientSession) -> list[dict[str, Any]]:
    async with client.get("/api/v1/things", params={"watch": "true"}) as response:
        return [json.loads(line) async for line in response.content if line.strip()]


async def test_requests_and_answers_pass_as_they_were_sent(api_server: Path, tmp_path: Path) -> None:
    with WatchProxy(api_server, tmp_path) as proxy:
        async with _client(proxy) as client:
            async with client.post("/api/v1/things", data=b'{"spec": 1}') as response:
                assert response.status == 200
                assert await response.json() == {"items": [thing("kept")], "method": "POST", "body": '{"spec": 1}'}
            assert await _watch(client) == EVENTS, "no filter: every event passes"


async def test_only_the_picked_watch_events_are_left_out(api_server: Path, tmp_path: Path) -> None:
    with WatchProxy(api_server, tmp_path) as proxy:
        proxy.drop(lambda event: event["object"]["metadata"].get("name") == "doomed")
        async with _client(proxy) as client:
            assert await _watch(client) == [EVENTS[1], EVENTS[3]]
            assert proxy.dropped == [EVENTS[0], EVENTS[2]]
            proxy.drop(None)
            assert await _watch(client) == EVENTS
