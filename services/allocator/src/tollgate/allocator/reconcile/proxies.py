"""What LoadBalancers and GWProxies share: a place within their Account's limit, a public address from their group's
ServicePrefix, a DNS endpoint from its endpoint-template, and an Envoy Deployment whose readiness their status
follows."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any

from kubernetes.client import ApiException

from tollgate.allocator import allocation, limits, proxy
from tollgate.allocator.addresses import PrefixNotFoundError, PublicAddresses
from tollgate.allocator.k8s import JSON, Kind, is_conflict
from tollgate.allocator.reconcile.part import Part
from tollgate.allocator.registry.errors import NotFoundError
from tollgate.allocator.registry.records import PROXY_KINDS, log_fields
from tollgate.models.epic import (
    GWProxySpec,
    LBServiceGroup,
    LBServiceGroupSpec,
    LoadBalancerSpec,
    ProxySpec,
    ProxyStatus,
    account_of,
)
from tollgate.runtime.operator import FINALIZER

log = logging.getLogger("tollgate.allocator.reconcile.proxies")
PROXY_SPECS: dict[str, type[ProxySpec]] = {"LoadBalancer": LoadBalancerSpec, "GWProxy": GWProxySpec}
# A freed address or a new ServicePrefix is no event of the waiting load balancer: it tries again by itself.
ADDRESS_RETRY_REASONS = ("PublicAddressesExhausted", "ServicePrefixNotFound")


def proxy_spec(obj: JSON) -> ProxySpec:
    return PROXY_SPECS[obj["kind"]].model_validate(obj["spec"])


@dataclass
class Proxies(Part):
    addresses: PublicAddresses
    xds_address: str

    async def admission(self, obj: JSON) -> proxy.Verdict:
        """Whether the object may be served: its Account exists and it is within the Account's limit for its kind
        (registry.limits), the reason and message. A Warning Event when it is refused a place (again with each new
        reason), a Normal one when it gets one after waiting."""
        meta = obj["metadata"]
        namespace, kind = meta["namespace"], PROXY_KINDS[obj["kind"]]
        try:
            decision = await self.registry.limits.admit(obj)
        except NotFoundError:
            account = account_of(namespace)
            message = (
                f"no Account {account!r} in namespace {namespace}: {limits.RULES[obj['kind']].plural} live in their "
                "account's namespace"
            )
            return False, "AccountNotFound", message
        before = ProxyStatus.model_validate(obj.get("status") or {}).condition(proxy.ALLOCATED)
        told = (before.reason, before.message) if before is not None else None
        if decision.served:
            if told is not None and told[0] == limits.LIMIT_EXCEEDED:
                log.info("served now: %s", decision.message, extra=log_fields(kind, namespace, meta["name"]))
                await self.kube.event(obj, limits.WITHIN_LIMIT, f"served now: {decision.message}")
            return True, limits.WITHIN_LIMIT, decision.message
        message = (
            f"{decision.message}: no Envoy, public address or tunnel for this one until one of them is deleted or the "
            "limit is raised"
        )
        if told != (limits.LIMIT_EXCEEDED, message):
            log.warning("not served: %s", message, extra=log_fields(kind, namespace, meta["name"]))
            await self.kube.event(obj, limits.LIMIT_EXCEEDED, message, warning=True)
        return False, limits.LIMIT_EXCEEDED, message

    async def public_address(self, obj: JSON, reason: str, allocated: str) -> tuple[bool, str, str, JSON]:
        """The object's public address from its group's ServicePrefix: kept when it holds one, claimed when given,
        else the pool's first free one. Without a prefix the address is the user's (or none)."""
        meta, spec = obj["metadata"], proxy_spec(obj)
        group_obj = await self.kube.get(LBServiceGroup, meta["namespace"], spec.service_group)
        if group_obj is None:
            return True, reason, allocated, obj
        group = LBServiceGroupSpec.model_validate(group_obj["spec"] or {})
        prefix = group.service_prefix
        if prefix is None:
            if not spec.endpoints:
                obj = await self._write_address(obj, group, spec.public_address, with_address=False)
            return True, reason, allocated, obj
        try:
            address = await self.addresses.claim(prefix, obj, spec.public_address)
        except PrefixNotFoundError as error:
            message = (
                f"spec.service-group: LBServiceGroup {spec.service_group!r} names a prefix that is missing: {error}"
            )
            return await self._address_refused(obj, "ServicePrefixNotFound", message)
        except allocation.AddressTakenError as error:
            return await self._address_refused(obj, "PublicAddressTaken", f"spec.public-address: {error}")
        except allocation.ExhaustedError as error:
            return await self._address_refused(obj, "PublicAddressesExhausted", f"ServicePrefix {prefix}: {error}")
        if spec.public_address != address or not spec.endpoints:
            obj = await self._write_address(obj, group, address, with_address=spec.public_address != address)
        if spec.public_address != address:
            await self.kube.event(
                obj, "PublicAddressAllocated", f"public address {address} from ServicePrefix {prefix}"
            )
        return True, reason, f"{allocated}, public address {address} (ServicePrefix {prefix})", obj

    async def _write_address(
        self, obj: JSON, group: LBServiceGroupSpec, address: IPv4Address | None, *, with_address: bool
    ) -> JSON:
        """Write the public address (when `with_address`) and, unless the object has them, its DNS records from the
        group's endpoint-template, as EPIC does once (EPIC's clients read `spec.endpoints[0].dnsName` without
        checking that it is there). One spec write: each write of a reconcile carries the reconcile's span as its
        trace parent, and the webhook takes a second write carrying the same parent for one that carries none."""
        meta, changes = obj["metadata"], dict[str, Any]()
        if with_address:
            changes["public-address"] = str(address)
        if not obj["spec"].get("endpoints"):
            endpoint = proxy.dns_endpoint(obj, group, address)
            changes["endpoints"] = [endpoint.to_wire()]
            log.info("DNS name %s for %s %s/%s", endpoint.dns_name, obj["kind"], meta["namespace"], meta["name"])
        return await self.kube.patch(PROXY_KINDS[obj["kind"]], meta["namespace"], meta["name"], {"spec": changes})

    async def _address_refused(self, obj: JSON, reason: str, message: str) -> tuple[bool, str, str, JSON]:
        await self.kube.event(obj, reason, message, warning=True)
        return False, reason, message, obj

    async def deleted(self, obj: JSON) -> None:
        """Free the public address of a deleted LoadBalancer or GWProxy."""
        for address in await self.addresses.release(obj):
            log.info("freed public address %s of deleted %s %s", address, obj["kind"], obj["metadata"]["name"])

    async def prefix_changed(self, prefix: JSON) -> None:
        """Free the addresses of a ServicePrefix whose holders are gone."""
        await self.addresses.sweep(prefix)

    async def deploy(self, obj: JSON, account: str) -> tuple[bool, str, str]:
        """Apply the object's Envoy ConfigMap and Deployment from its service group; whether the proxy is ready, the
        reason and message."""
        meta, spec = obj["metadata"], proxy_spec(obj)
        too_long = proxy.name_not_a_label(obj)
        if too_long is not None:  # the webhook refuses such a name; one created while it was down stops here
            await self.kube.event(obj, "NameTooLong", too_long, warning=True)
            return False, "NameTooLong", too_long
        group_obj = await self.kube.get(LBServiceGroup, meta["namespace"], spec.service_group)
        if group_obj is None:
            message = f"spec.service-group: no LBServiceGroup {spec.service_group!r} in namespace {meta['namespace']}"
            await self.kube.event(obj, "ServiceGroupNotFound", message, warning=True)
            return False, "ServiceGroupNotFound", message
        await self._hold(group_obj)
        group = LBServiceGroupSpec.model_validate(group_obj.get("spec") or {})
        if spec.envoy_replica_count is None:  # EPIC copies the group's count into a new load balancer
            replicas = {"envoy-replica-count": group.envoy_replica_count}
            obj = await self.kube.patch(PROXY_KINDS[obj["kind"]], meta["namespace"], meta["name"], {"spec": replicas})
        text = proxy.bootstrap(group, meta["name"], self.xds_address)
        await self.kube.apply(proxy.config_map(obj, account, text))
        deployment = await self.kube.apply(proxy.deployment(obj, account, group, text))
        return proxy.proxy_readiness(deployment)

    async def _hold(self, group: JSON) -> None:
        """A group in use holds the allocator's finalizer from its first user's reconcile on. kopf adds it when it
        first handles the group; a group deleted before that went at once, users or not (its deletion handler,
        which keeps a group in use, never ran)."""
        meta = group["metadata"]
        finalizers = meta.get("finalizers") or []
        if FINALIZER in finalizers or meta.get("deletionTimestamp"):
            return
        body = {"metadata": {"finalizers": [*finalizers, FINALIZER], "resourceVersion": meta["resourceVersion"]}}
        try:
            await self.kube.patch(LBServiceGroup, meta["namespace"], meta["name"], body)
        except ApiException as error:
            if not is_conflict(error):  # a conflict: written since read, by kopf adding it most likely
                raise
            return
        log.info("LBServiceGroup %s/%s held while in use", meta["namespace"], meta["name"])

    async def deployment_changed(self, deployment: JSON) -> None:
        """The Envoy Deployment moved: reflect it in its object's ProxyReady and Ready."""
        labels = deployment["metadata"].get("labels") or {}
        namespace = deployment["metadata"]["namespace"]
        for kind_name, label in proxy.OWNER_LABELS.items():
            if name := labels.get(label):
                attributes = {"namespace": namespace, "name": name, "kind": kind_name}
                with self.tracer.start_as_current_span("reconcile proxy", attributes=attributes):
                    await self._deployment_changed(PROXY_KINDS[kind_name], namespace, name, deployment)

    async def _deployment_changed(self, kind: Kind, namespace: str, name: str, deployment: JSON) -> None:
        obj = await self.kube.get(kind, namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        await self.registry.node_tunnels.refresh_epic_address(obj)
        ready, reason, message = proxy.proxy_readiness(deployment)
        current = ProxyStatus.model_validate(obj.get("status") or {}).condition(proxy.PROXY_READY)
        wanted = ("True" if ready else "False", reason, message)
        if current is not None and (current.status, current.reason, current.message) == wanted:
            return

        def write(status: ProxyStatus) -> None:
            generation = status.observed_generation
            status.set_condition(proxy.PROXY_READY, "True" if ready else "False", reason, message, generation)
            proxy.settle_ready(status, generation)

        await self.update_status(kind, namespace, name, write)
        if ready:
            await self.kube.event(obj, "ProxyReady", message)
