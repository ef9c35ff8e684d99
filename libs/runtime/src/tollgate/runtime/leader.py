"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection package does it.

One replica holds the Lease and works; the others stand by, reading it every `retry` seconds. A standby
takes the Lease over when the holder hands it back (a clean shutdown clears `holderIdentity`) or when the
record has not changed for `leaseDurationSeconds` as timed on the standby's own clock, so clocks that
disagree between nodes do not matter. Every write is a replace at the resourceVersion just read: of two
replicas racing for the Lease, one gets a Conflict and stays a standby.

A holder that cannot renew for `renew_deadline` (shorter than the lease duration) gives up before any
standby could take over, so two replicas never act at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client

from tollgate.runtime.kube import is_conflict, is_not_found
from tollgate.runtime.settings import ControllerSettings

log = logging.getLogger("tollgate.runtime.leader")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    duration: float = 15.0  # seconds a record may go unrenewed before a standby takes over

    def __post_init__(self) -> None:
        if self.duration < 2:
            raise ValueError(f"lease duration must be at least 2 s (got {self.duration})")

    @property
    def period(self) -> float:
        """How often the holder renews, and a standby reads the Lease."""
        return self.duration / 5

    @property
    def renew_deadline(self) -> float:
        return self.duration * 2 / 3


def claimed(spec: client.V1LeaseSpec, identity: str, duration: float, now: datetime) -> client.V1LeaseSpec:
    """The Lease spec once `identity` has renewed it, or taken it over: a new acquire time, one more transition."""
    taking_over = spec.holder_identity != identity
    return client.V1LeaseSpec(
        holder_identity=identity,
        lease_duration_seconds=max(1, round(duration)),
        acquire_time=now if taking_over else spec.acquire_time,
        renew_time=now,
        lease_transitions=(spec.lease_transitions or 0) + (1 if taking_over and spec.acquire_time else 0),
    )


class LeaseLost(RuntimeError):
    """This replica no longer holds the Lease; the message says why."""


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


class LeaderElector:
    """Acquire, keep and release one Lease. The Kubernetes client is synchronous: calls run in threads."""

    def __init__(self, api: client.ApiClient, config: LeaseConfig) -> None:
        self.api = client.CoordinationV1Api(api)
        self.config = config
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0

    async def _read(self) -> client.V1Lease | None:
        try:
            return await asyncio.to_thread(self.api.read_namespaced_lease, self.config.name, self.config.namespace)
        except client.ApiException as error:
            if is_not_found(error):
                return None
            raise

    async def _write(self, lease: client.V1Lease, spec: client.V1LeaseSpec) -> bool:
        """Replace the Lease with `spec` at the version read; False when another replica wrote first."""
        lease.spec = spec
        try:
            await asyncio.to_thread(self.api.replace_namespaced_lease, self.config.name, self.config.namespace, lease)
        except client.ApiException as error:
            if is_conflict(error):
                return False
            raise
        return True

    async def _create(self) -> bool:
        spec = claimed(client.V1LeaseSpec(), self.config.identity, self.config.duration, datetime.now(UTC))
        lease = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.config.name, namespace=self.config.namespace), spec=spec
        )
        try:
            await asyncio.to_thread(self.api.create_namespaced_lease, self.config.namespace, lease)
        except client.ApiException as error:
            if is_conflict(error):
                return False
            raise
        return True

    def _expired(self, spec: client.V1LeaseSpec) -> bool:
        """Whether the holder has let the Lease lapse, timed from when this replica saw the record change."""
        if not spec.holder_identity:
            return True
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = float(spec.lease_duration_seconds or self.config.duration)
        return time.monotonic() - self._observed_at > duration

    async def try_acquire(self) -> bool:
        """One attempt: True when this replica holds the Lease afterwards."""
        lease = await self._read()
        if lease is None:
            return await self._create()
        spec = lease.spec or client.V1LeaseSpec()
        mine = spec.holder_identity == self.config.identity
        if not mine and not self._expired(spec):
            return False
        previous = spec.holder_identity or "nobody"
        if not await self._write(lease, claimed(spec, self.config.identity, self.config.duration, datetime.now(UTC))):
            return False
        if not mine:
            log.info("took over the Lease", extra={"lease": self._where(), "previous_holder": previous})
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this replica holds the Lease (True), or until `stop` is set (False)."""
        announced = False
        while not stop.is_set():
            try:
                if await self.try_acquire():
                    log.info("leading", extra={"lease": self._where(), "identity": self.config.identity})
                    return True
                if not announced:
                    log.info("standing by: another replica holds the Lease", extra={"lease": self._where()})
                    announced = True
            except client.ApiException as error:
                log.warning("cannot read or write the Lease", extra={"lease": self._where(), "error": str(error)})
            if await _stopped_within(stop, self.config.period):
                break
        return False

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew the Lease until `stop` is set; raise LeaseLost when another replica holds it or when renewing
        has failed for the renew deadline."""
        renewed_at = time.monotonic()
        while not await _stopped_within(stop, self.config.period):
            try:
                lease = await self._read()
                holder = lease.spec.holder_identity if lease is not None and lease.spec is not None else None
                if lease is None or lease.spec is None or holder != self.config.identity:
                    raise LeaseLost(f"Lease {self._where()} is now held by {holder or 'nobody'}")
                now = datetime.now(UTC)
                if await self._write(lease, claimed(lease.spec, self.config.identity, self.config.duration, now)):
                    renewed_at = time.monotonic()
            except client.ApiException as error:
                log.warning("cannot renew the Lease", extra={"lease": self._where(), "error": str(error)})
            if time.monotonic() - renewed_at > self.config.renew_deadline:
                raise LeaseLost(f"could not renew Lease {self._where()} for {self.config.renew_deadline:.0f} s")

    async def release(self) -> None:
        """Hand the Lease back so a standby takes over at once (nothing to do when another replica holds it)."""
        try:
            lease = await self._read()
            if lease is None or lease.spec is None or lease.spec.holder_identity != self.config.identity:
                return
            spec = lease.spec
            spec.holder_identity, spec.lease_duration_seconds, spec.renew_time = None, 1, datetime.now(UTC)
            if await self._write(lease, spec):
                log.info("released the Lease", extra={"lease": self._where()})
        except client.ApiException as error:
            log.warning("cannot release the Lease", extra={"lease": self._where(), "error": str(error)})

    def _where(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"


def lease_config(settings: ControllerSettings) -> LeaseConfig | None:
    """The Lease `settings` ask for (None without leader election); this process's identity is unique."""
    if not settings.leader_election:
        return None
    namespace = settings.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise ValueError(
            "leader election needs the Lease's namespace: set the LEASE_NAMESPACE setting or POD_NAMESPACE"
        )
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    return LeaseConfig(namespace, settings.service_name, identity, settings.lease_duration_seconds)
