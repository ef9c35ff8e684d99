"""Account limits: the record of the LoadBalancers and GWProxies the allocator serves, in their Account's status,
written with its resourceVersion (the rules: tollgate.allocator.limits). Whoever is about to act for an object (its
reconcile, before the service ID, the public address and the Envoy; a registration, before a tunnel ID) asks here
first."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kubernetes import client

from tollgate.allocator import limits
from tollgate.allocator.k8s import JSON, Kube, is_conflict
from tollgate.allocator.registry.errors import AbortedError, LimitExceededError, NotFoundError
from tollgate.allocator.registry.records import PROXY_KINDS, described, log_fields
from tollgate.allocator.tunnels import ATTEMPTS, Metrics
from tollgate.models.epic import Account, AccountStatus, account_of
from tollgate.runtime.locks import KeyedLocks

log = logging.getLogger("tollgate.allocator.registry.limits")


@dataclass
class AccountLimits:
    kube: Kube
    metrics: Metrics
    _turns: KeyedLocks[str] = field(default_factory=KeyedLocks, init=False)

    async def admit(self, obj: JSON) -> limits.Decision:
        """Whether the LoadBalancer or GWProxy is within its Account's limit: named in the Account's record, or
        recorded there now that it fits. NotFoundError when the namespace has no Account.

        Only when the namespace holds more objects of the kind than the limit are they listed (their metadata) and
        ranked; otherwise counting them is enough. Both are read after the Account, so the conditional write of the
        record is decided on what was there when the record was read."""
        rule = limits.RULES[obj["kind"]]
        namespace = obj["metadata"]["namespace"]
        candidate = limits.holder_of(obj)
        account = await self._account(namespace)
        if limits.served(rule.kind, account).get(candidate.name) == candidate.uid:
            return limits.decide(rule, self._judged(rule, account), candidate, None)
        # This process's decisions in one account take turns: concurrent ones would only make each other's writes
        # conflict (the conditional write still guards against every other writer).
        async with self._turns.hold(namespace):
            for _ in range(ATTEMPTS):
                account = await self._account(namespace)
                judged = self._judged(rule, account)
                present: list[limits.Holder] | None = None
                if judged.served.get(candidate.name) != candidate.uid:
                    count = await self.kube.count(PROXY_KINDS[rule.kind], namespace)
                    if count is None or count > judged.limit:
                        present = [
                            limits.holder_of(item)
                            async for page in self.kube.pages(PROXY_KINDS[rule.kind], namespace, metadata_only=True)
                            for item in page
                        ]
                decision = limits.decide(rule, judged, candidate, present)
                if decision.record == judged.served:
                    return decision
                if await self._write(rule, account, decision.record):
                    log.info(
                        "%s %s is served: %s (%d served now)", rule.kind, candidate.name, decision.message,
                        len(decision.record), extra=log_fields(Account, namespace, judged.name),
                    )  # fmt: skip
                    return decision
        raise AbortedError(f"Account of {namespace}: its record of served {rule.plural} kept changing")

    async def _account(self, namespace: str) -> JSON:
        name = account_of(namespace)
        account = await self.kube.get(Account, namespace, name)
        if account is None:
            raise NotFoundError(f"no Account {name!r} in namespace {namespace}")
        return account

    @staticmethod
    def _judged(rule: limits.Rule, account: JSON) -> limits.AccountLimit:
        meta = account["metadata"]
        limit = rule.limit(account.get("spec") or {})
        return limits.AccountLimit(meta["name"], meta["namespace"], limit, limits.served(rule.kind, account))

    async def _write(self, rule: limits.Rule, account: JSON, served: dict[str, str]) -> bool:
        """Replace the Account's record of the kind with the resourceVersion read; False on 409 Conflict."""
        status = AccountStatus.model_validate(account.get("status") or {})
        rule.record_in(status, served)
        account["status"] = status.to_wire()
        try:
            await self.kube.replace_status(Account, account)
        except client.ApiException as error:
            if not is_conflict(error):
                raise
            self.metrics.conflict(Account.resource.kind)
            return False
        return True

    async def require(self, obj: JSON) -> None:
        """LimitExceededError, with the reason, unless the LoadBalancer or GWProxy is within its Account's limit."""
        decision = await self.admit(obj)
        if not decision.served:
            what = described(PROXY_KINDS[obj["kind"]], obj["metadata"]["name"])
            raise LimitExceededError(f"{what} is not served: {decision.message}")

    async def release(self, obj: JSON) -> bool:
        """A LoadBalancer or GWProxy was deleted: its place, if it held one, goes. Whether others of its kind may be
        waiting for a place (the namespace holds more of them than the record names): a place opened, or an older
        object they waited behind went before it got one."""
        kind = PROXY_KINDS[obj["kind"]]
        rule = limits.RULES[obj["kind"]]
        meta = obj["metadata"]
        namespace = meta["namespace"]
        served = await self._drop(rule, namespace, {meta["name"]: str(meta["uid"])})
        if served is None:
            return False
        count = await self.kube.count(kind, namespace)
        return count is None or count > len(served)

    async def sweep(self, account: JSON, present: Mapping[str, Collection[tuple[str, str]]]) -> None:
        """Drop the record's entries whose object is gone (deleted while no allocator watched). `account` must have
        been read before `present` (by kind, the (name, uid) of every object) was listed: an entry written since is
        never judged."""
        for kind, rule in limits.RULES.items():
            here = set(present.get(kind, ()))
            stale = {name: uid for name, uid in limits.served(kind, account).items() if (name, uid) not in here}
            if stale:
                await self._drop(rule, account["metadata"]["namespace"], stale)

    async def _drop(self, rule: limits.Rule, namespace: str, entries: dict[str, str]) -> dict[str, str] | None:
        """Remove these (name: uid) entries from the record, those still there; the record as it is then, None when
        the Account is gone."""
        async with self._turns.hold(namespace):
            for _ in range(ATTEMPTS):
                try:
                    account = await self._account(namespace)
                except NotFoundError:
                    return None
                served = limits.served(rule.kind, account)
                gone = sorted(name for name, uid in entries.items() if served.get(name) == uid)
                if not gone:
                    return served
                kept = {name: uid for name, uid in served.items() if name not in gone}
                if await self._write(rule, account, kept):
                    log.info(
                        "%s %s left the record of served %s", rule.kind, ", ".join(gone), rule.plural,
                        extra=log_fields(Account, namespace, account_of(namespace)),
                    )  # fmt: skip
                    return kept
        raise AbortedError(f"Account of {namespace}: its record of served {rule.plural} kept changing")
