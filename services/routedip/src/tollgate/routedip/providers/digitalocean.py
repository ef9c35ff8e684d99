"""The `digitalocean` provider: reserved IPs and a Cloud Firewall through the DigitalOcean API.

- Assigning is `POST /v2/reserved_ips/{ip}/actions {"type": "assign", "droplet_id": N}`, an asynchronous
  action polled at `/v2/reserved_ips/{ip}/actions/{id}` until `completed` (or `errored`). Assigning an
  IP held by another droplet moves it there. A 422 ("already assigned", or the droplet already has a
  reserved IP) is answered by asking who holds the IP: the target means done, anything else an error.
- Unassigning first asks who holds the IP, and only unassigns it from the droplet it was asked about.
- The class's firewall (`spec.digitalocean.firewallID`) is dedicated to it: its droplets and inbound
  rules are made exactly what the plan lists.
- Requests honour `ratelimit-remaining` / `ratelimit-reset` (waiting for the window when it is used
  up), 429 with `Retry-After`, and retry 5xx and connection errors with a growing backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from tollgate.routedip.firewall import FirewallPlan
from tollgate.routedip.providers import FirewallContext, NodeTarget, ProviderError, RoutedIPRef
from tollgate.runtime.backoff import Backoff

log = logging.getLogger("tollgate.routedip.digitalocean")
ALL_SOURCES = {"addresses": ["0.0.0.0/0", "::/0"]}
FIREWALL_PROTOCOLS = ("tcp", "udp")
RETRY = Backoff(base=0.5, cap=60.0, jitter=0.5)


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.body.get("id") or f"HTTP {self.status}")


class DigitalOceanClient:
    """A small DigitalOcean API client that respects the API's rate limits and retries transient errors."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        attempts: int = 6,
        backoff: Backoff = RETRY,
        max_wait: float = 60.0,
        poll_interval: float = 0.5,
        action_timeout: float = 120.0,
        timeout: float = 30.0,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.attempts = attempts
        self.backoff = backoff
        self.max_wait = max_wait
        self.poll_interval = poll_interval
        self.action_timeout = action_timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._resume_at = 0.0  # monotonic time before which the rate-limit window is used up
        self.rate_limited = 0

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            )
        return self._session

    def _note_rate_limit(self, headers: Any) -> None:
        remaining, reset = headers.get("ratelimit-remaining"), headers.get("ratelimit-reset")
        if remaining is not None and reset is not None and remaining.strip() == "0":
            wait = min(self.max_wait, max(0.0, float(reset) - time.time()))
            self._resume_at = max(self._resume_at, time.monotonic() + wait)

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Response:
        """One API call with retries; returns every non-retried answer (2xx and 4xx) to the caller."""
        last = ""
        for attempt in range(self.attempts):
            pause = self._resume_at - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                async with self._client().request(method, f"{self.api_url}{path}", json=body) as reply:
                    self._note_rate_limit(reply.headers)
                    text = await reply.text()
                    payload = json.loads(text) if text.strip() else None
                    response = Response(reply.status, payload if isinstance(payload, dict) else {})
                    retry_after = reply.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                last = f"{type(error).__name__}: {error}"
                await asyncio.sleep(self.backoff.pause(attempt))
                continue
            if response.status == 429:
                self.rate_limited += 1
                wait = float(retry_after) if retry_after else self.backoff.pause(attempt)
                log.warning("DigitalOcean rate limit reached; waiting %.1f s", wait)
                self._resume_at = max(self._resume_at, time.monotonic() + min(self.max_wait, wait))
                last = f"429 {response.message}"
                continue
            if response.status >= 500:
                last = f"{response.status} {response.message}"
                await asyncio.sleep(self.backoff.pause(attempt))
                continue
            if response.status == 401:
                raise ProviderError(f"DigitalOcean refused the API token: {response.message}", reason="Unauthorized")
            return response
        raise ProviderError(
            f"DigitalOcean {method} {path} failed after {self.attempts} attempts: {last}",
            reason="ProviderUnavailable",
            retry_after=self.backoff.pause(self.attempts),
        )

    async def holder(self, ip: str) -> int | None:
        """The droplet holding a reserved IP, or None."""
        response = await self.request("GET", f"/v2/reserved_ips/{ip}")
        if response.status == 404:
            raise ProviderError(f"reserved IP {ip} does not exist in this DigitalOcean account", reason="IPNotFound")
        if response.status != 200:
            raise ProviderError(f"reading reserved IP {ip}: {response.message}")
        droplet = (response.body.get("reserved_ip") or {}).get("droplet")
        return int(droplet["id"]) if droplet else None

    async def act(self, ip: str, action: dict[str, Any]) -> Response:
        return await self.request("POST", f"/v2/reserved_ips/{ip}/actions", action)

    async def wait_action(self, ip: str, action_id: int) -> None:
        deadline = time.monotonic() + self.action_timeout
        while True:
            response = await self.request("GET", f"/v2/reserved_ips/{ip}/actions/{action_id}")
            if response.status != 200:
                raise ProviderError(f"polling action {action_id} on {ip}: {response.message}")
            status = (response.body.get("action") or {}).get("status")
            if status == "completed":
                return
            if status == "errored":
                raise ProviderError(f"DigitalOcean action {action_id} on {ip} errored", reason="ActionErrored")
            if time.monotonic() > deadline:
                raise ProviderError(
                    f"DigitalOcean action {action_id} on {ip} still {status} after {self.action_timeout:.0f} s",
                    reason="ActionTimeout",
                )
            await asyncio.sleep(self.poll_interval)


def droplet_id(node: NodeTarget) -> int:
    machine = node.machine_id
    if not node.provider_id or not node.provider_id.startswith("digitalocean://") or not (machine or "").isdigit():
        raise ProviderError(
            f"node {node.name}: spec.providerID {node.provider_id!r} is not digitalocean://<droplet ID>",
            reason="NotADroplet",
        )
    return int(machine or 0)


def rule_key(rule: dict[str, Any]) -> tuple[str, str]:
    return (str(rule.get("protocol")), str(rule.get("ports")))


class DigitalOceanProvider:
    def __init__(self, client: DigitalOceanClient, firewall_id: str | None) -> None:
        self.client = client
        self.firewall_id = firewall_id

    async def assign(self, routed_ip: RoutedIPRef, node: NodeTarget, previous: NodeTarget | None) -> None:
        droplet = droplet_id(node)
        response = await self.client.act(routed_ip.ip, {"type": "assign", "droplet_id": droplet})
        if response.status == 422:
            holder = await self.client.holder(routed_ip.ip)
            if holder == droplet:
                return
            raise ProviderError(
                f"DigitalOcean refused to assign {routed_ip.ip} to droplet {droplet} ({node.name}): "
                f"{response.message}; the IP is held by {f'droplet {holder}' if holder else 'no droplet'}",
                reason="AssignRefused",
            )
        if response.status not in (200, 201, 202):
            raise ProviderError(f"assigning {routed_ip.ip} to droplet {droplet}: {response.message}")
        await self.client.wait_action(routed_ip.ip, int(response.body["action"]["id"]))

    async def unassign(self, routed_ip: RoutedIPRef, node: NodeTarget) -> None:
        if node.provider_id is None:
            return  # a deleted node: DigitalOcean releases the reserved IPs of a destroyed droplet
        if droplet_id(node) != await self.client.holder(routed_ip.ip):
            return
        response = await self.client.act(routed_ip.ip, {"type": "unassign"})
        if response.status == 422 and await self.client.holder(routed_ip.ip) is None:
            return
        if response.status not in (200, 201, 202):
            raise ProviderError(f"unassigning {routed_ip.ip}: {response.message}")
        await self.client.wait_action(routed_ip.ip, int(response.body["action"]["id"]))

    async def apply_firewall(self, plan: FirewallPlan, context: FirewallContext) -> None:
        if not self.firewall_id:
            return
        unresolved = plan.unresolved()
        if unresolved:
            raise ProviderError(
                f"nodes without a droplet ID in spec.providerID: {', '.join(unresolved)}", reason="NotADroplet"
            )
        path = f"/v2/firewalls/{self.firewall_id}"
        response = await self.client.request("GET", path)
        if response.status != 200:
            raise ProviderError(f"reading firewall {self.firewall_id}: {response.message}", reason="FirewallNotFound")
        firewall = response.body.get("firewall") or {}
        have_droplets = {int(d) for d in firewall.get("droplet_ids") or []}
        want_droplets = {int(m) for m in plan.machine_ids()}
        have_rules = {rule_key(r): r for r in firewall.get("inbound_rules") or []}
        want_rules = {
            (p.protocol, str(p.port)): {"protocol": p.protocol, "ports": str(p.port), "sources": ALL_SOURCES}
            for p in plan.all_ports()
            if p.protocol in FIREWALL_PROTOCOLS
        }
        await self._change(path, "droplets", "POST", {"droplet_ids": sorted(want_droplets - have_droplets)})
        await self._change(
            path, "rules", "POST", {"inbound_rules": [r for k, r in sorted(want_rules.items()) if k not in have_rules]}
        )
        await self._change(
            path,
            "rules",
            "DELETE",
            {"inbound_rules": [r for k, r in sorted(have_rules.items()) if k not in want_rules]},
        )
        await self._change(path, "droplets", "DELETE", {"droplet_ids": sorted(have_droplets - want_droplets)})

    async def _change(self, path: str, what: str, method: str, body: dict[str, list[Any]]) -> None:
        if not next(iter(body.values())):
            return
        response = await self.client.request(method, f"{path}/{what}", body)
        if response.status not in (200, 201, 202, 204):
            raise ProviderError(f"{method} firewall {what}: {response.message}", reason="FirewallRefused")
