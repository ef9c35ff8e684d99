"""A fake DigitalOcean API, a real HTTP server: develop and test the `digitalocean` provider without an account.

It serves the endpoints the provider uses, with DigitalOcean's behaviour where it matters:
reserved IPs (`GET /v2/reserved_ips/{ip}`, `POST .../actions` assign/unassign as asynchronous actions
that complete after a few polls of `GET .../actions/{id}`, 422 when the droplet already holds a
reserved IP or the IP is already assigned to it), firewalls (`GET /v2/firewalls/{id}`,
`POST/DELETE .../droplets` and `.../rules`), bearer-token authentication (401), and `ratelimit-*`
headers on every answer. Faults are injected per request: 429 with `Retry-After`, 5xx, anything.

    python -m tollgate.testing.fakedo --port 8089 --ip 203.0.113.10 --droplets 400000,400001 --firewall fw-1
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Action:
    id: int
    ip: str
    type: str
    droplet: int | None
    polls_left: int
    status: str = "in-progress"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "type": f"{self.type}_ip",
            "resource_type": "reserved_ip",
            "region_slug": "nyc3",
        }


@dataclass
class Fault:
    status: int
    method: str | None = None
    path: str | None = None
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and self.method in (None, method) and (self.path is None or self.path in path)


@dataclass
class Firewall:
    id: str
    droplet_ids: set[int] = field(default_factory=set)
    inbound_rules: list[dict[str, Any]] = field(default_factory=list)


class FakeDigitalOcean:
    def __init__(self, token: str = "fake-token", action_polls: int = 2, rate_limit: int = 5000) -> None:
        self.token = token
        self.action_polls = action_polls
        self.reserved_ips: dict[str, int | None] = {}
        self.droplets: set[int] = set()
        self.firewalls: dict[str, Firewall] = {}
        self.actions: dict[int, Action] = {}
        self.faults: list[Fault] = []
        self.actions_to_error = 0
        self.requests: list[tuple[float, str, str, Any]] = []
        self.rate_limit = rate_limit
        self.rate_remaining = rate_limit
        self.rate_reset = time.time() + 3600
        self._ids = itertools.count(1000)
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ----- setup -----
    def add_reserved_ip(self, ip: str, droplet: int | None = None) -> None:
        self.reserved_ips[ip] = droplet

    def add_droplets(self, *droplets: int) -> None:
        self.droplets.update(droplets)

    def add_firewall(self, firewall_id: str, rules: list[dict[str, Any]] | None = None) -> Firewall:
        firewall = self.firewalls[firewall_id] = Firewall(firewall_id, inbound_rules=list(rules or []))
        return firewall

    def inject(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        headers: dict[str, str] | None = None,
        message: str = "injected fault",
    ) -> None:
        """The next `times` matching requests get `status` instead of their answer."""
        body = {"id": "injected", "message": message}
        self.faults.append(Fault(status, method, path, times, dict(headers or {}), body))

    def exhaust_rate_limit(self, reset_in: float) -> None:
        """The next answer says the window is used up until `reset_in` seconds from now."""
        self.rate_remaining = 0
        self.rate_reset = time.time() + reset_in

    def calls(self, method: str | None = None, path: str | None = None) -> list[tuple[float, str, str, Any]]:
        return [r for r in self.requests if method in (None, r[1]) and (path is None or path in r[2])]

    # ----- server -----
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/v2/reserved_ips/{ip}", self._get_ip)
        app.router.add_post("/v2/reserved_ips/{ip}/actions", self._post_action)
        app.router.add_get("/v2/reserved_ips/{ip}/actions/{id}", self._get_action)
        app.router.add_get("/v2/firewalls/{id}", self._get_firewall)
        app.router.add_route("*", "/v2/firewalls/{id}/droplets", self._firewall_droplets)
        app.router.add_route("*", "/v2/firewalls/{id}/rules", self._firewall_rules)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}"
        return self.url

    def trust_settings(self) -> dict[str, str]:
        """tollgate-routedip's settings that let it send a token to this fake: it serves plain http on loopback,
        so its origin is allow-listed and http permitted for its host:port alone."""
        return {
            "TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS": self.url,
            "TOLLGATE_ROUTEDIP_DIGITALOCEAN_HTTP_HOSTS": self.url.removeprefix("http://"),
        }

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _rate_headers(self) -> dict[str, str]:
        headers = {
            "ratelimit-limit": str(self.rate_limit),
            "ratelimit-remaining": str(self.rate_remaining),
            "ratelimit-reset": str(int(self.rate_reset) if self.rate_remaining else self.rate_reset),
        }
        if self.rate_remaining == 0:
            self.rate_remaining = self.rate_limit
        else:
            self.rate_remaining -= 1
        return headers

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append((time.monotonic(), request.method, request.path, body))
        headers = self._rate_headers()
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _json(401, {"id": "unauthorized", "message": "Unable to authenticate you"}, headers)
        for fault in self.faults:
            if fault.matches(request.method, request.path):
                fault.times -= 1
                return _json(fault.status, fault.body, {**headers, **fault.headers})
        response = await handler(request)
        response.headers.update(headers)
        return response

    async def _get_ip(self, request: web.Request) -> web.Response:
        ip = request.match_info["ip"]
        if ip not in self.reserved_ips:
            return _json(404, {"id": "not_found", "message": "The resource you were accessing could not be found."})
        droplet = self.reserved_ips[ip]
        locked = any(a.ip == ip and a.status == "in-progress" for a in self.actions.values())
        return _json(
            200,
            {
                "reserved_ip": {
                    "ip": ip,
                    "droplet": {"id": droplet, "name": f"droplet-{droplet}"} if droplet is not None else None,
                    "region": {"slug": "nyc3"},
                    "locked": locked,
                }
            },
        )

    async def _post_action(self, request: web.Request) -> web.Response:
        ip = request.match_info["ip"]
        if ip not in self.reserved_ips:
            return _json(404, {"id": "not_found", "message": "The resource you were accessing could not be found."})
        body = await request.json()
        if any(a.ip == ip and a.status == "in-progress" for a in self.actions.values()):
            return _json(422, {"id": "unprocessable_entity", "message": "Reserved IP is locked by another action."})
        if body.get("type") == "assign":
            droplet = int(body.get("droplet_id", 0))
            if droplet not in self.droplets:
                return _json(422, {"id": "unprocessable_entity", "message": f"Droplet {droplet} was not found."})
            if self.reserved_ips[ip] == droplet:
                return _json(422, {"id": "unprocessable_entity", "message": "The reserved IP is already assigned."})
            if any(d == droplet for other, d in self.reserved_ips.items() if other != ip):
                return _json(422, {"id": "unprocessable_entity", "message": "Droplet already has a reserved IP."})
        elif body.get("type") == "unassign":
            droplet = None
            if self.reserved_ips[ip] is None:
                return _json(422, {"id": "unprocessable_entity", "message": "The reserved IP is not assigned."})
        else:
            return _json(422, {"id": "unprocessable_entity", "message": f"unknown action type {body.get('type')!r}"})
        action = Action(next(self._ids), ip, body["type"], droplet, self.action_polls)
        self.actions[action.id] = action
        if action.polls_left <= 0:
            self._complete(action)
        return _json(201, {"action": action.to_json()})

    def _complete(self, action: Action) -> None:
        if self.actions_to_error > 0:
            self.actions_to_error -= 1
            action.status = "errored"
            return
        action.status = "completed"
        self.reserved_ips[action.ip] = action.droplet

    async def _get_action(self, request: web.Request) -> web.Response:
        action = self.actions.get(int(request.match_info["id"]))
        if action is None or action.ip != request.match_info["ip"]:
            return _json(404, {"id": "not_found", "message": "The resource you were accessing could not be found."})
        if action.status == "in-progress":
            action.polls_left -= 1
            if action.polls_left <= 0:
                self._complete(action)
        return _json(200, {"action": action.to_json()})

    def _firewall(self, request: web.Request) -> Firewall | None:
        return self.firewalls.get(request.match_info["id"])

    async def _get_firewall(self, request: web.Request) -> web.Response:
        firewall = self._firewall(request)
        if firewall is None:
            return _json(404, {"id": "not_found", "message": "The resource you were accessing could not be found."})
        return _json(
            200,
            {
                "firewall": {
                    "id": firewall.id,
                    "status": "succeeded",
                    "droplet_ids": sorted(firewall.droplet_ids),
                    "inbound_rules": firewall.inbound_rules,
                    "outbound_rules": [],
                }
            },
        )

    async def _firewall_droplets(self, request: web.Request) -> web.Response:
        firewall = self._firewall(request)
        if firewall is None:
            return _json(404, {"id": "not_found", "message": "The resource you were accessing could not be found."})
        ids = {int(d) for d in (await request.json()).get("droplet_ids") or []}
        if request.method == "POST":
            firewall.droplet_ids |= ids
        elif request.method == "DELETE":
            firewall.droplet_ids -= ids
        else:
            return _json(405, {"id": "method_not_allowed", "message": request.method})
        return web.Response(status=204)

    async def _firewall_rules(self, request: web.Request) -> web.Response:
        firewall = self._firewall(request)
        if firewall is None:
            return _json(404, {"id": "not_found", "message": "The resource you were accessing could not be found."})
        rules = (await request.json()).get("inbound_rules") or []
        if request.method == "POST":
            firewall.inbound_rules.extend(r for r in rules if r not in firewall.inbound_rules)
        elif request.method == "DELETE":
            firewall.inbound_rules = [r for r in firewall.inbound_rules if r not in rules]
        else:
            return _json(405, {"id": "method_not_allowed", "message": request.method})
        return web.Response(status=204)


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json", headers=headers)


class FakeDigitalOceanThread:
    """The fake on its own event loop in a thread, so that a test's blocking waits do not stall it:
    `with FakeDigitalOceanThread(token) as fake:`."""

    def __init__(self, token: str, action_polls: int = 2) -> None:
        self.fake = FakeDigitalOcean(token=token, action_polls=action_polls)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-digitalocean", daemon=True)

    def __enter__(self) -> FakeDigitalOcean:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(), self.loop).result(10)
        return self.fake

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _serve(args: argparse.Namespace) -> None:
    fake = FakeDigitalOcean(token=args.token)
    for ip in args.ip:
        fake.add_reserved_ip(ip)
    fake.add_droplets(*(int(d) for d in args.droplets.split(",") if d))
    for firewall in args.firewall:
        fake.add_firewall(firewall)
    print(f"fake DigitalOcean API at {await fake.start(port=args.port)} (token {args.token!r})", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tollgate.testing.fakedo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--token", default="fake-token")
    parser.add_argument("--ip", action="append", default=[], help="a reserved IP (repeatable)")
    parser.add_argument("--droplets", default="400000,400001,400002", help="droplet IDs, comma separated")
    parser.add_argument("--firewall", action="append", default=[], help="a firewall ID (repeatable)")
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
