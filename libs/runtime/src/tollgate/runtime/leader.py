"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection package does it.

One replica holds the Lease and works; the others stand by, reading it every `retry` seconds. A standby
takes the Lease over when the holder hands it back (a clean shutdown clears `holderIdentity`) or when the
record has not changed for `leaseDurationSeconds` as timed on the standby's own clock, so clocks that
disagree between nodes do not matter. Every write is a replace at the resourceVersion just read: of two
replicas racing for the Lease, one gets a Conflict and stays a standby.

A holder that cannot renew for `renew_deadline` gives up, and must have stopped acting `stop_margin` later;
both together are shorter than the lease duration, and both are timed from the start of the last renewal that
succeeded (before the API server wrote it, so before any standby saw it), so the holder has stopped before any
standby could take over: two replicas never act at once. Every renew attempt is bounded in time, whatever the
network does (a half-open connection, a frozen peer), and a watchdog thread, which needs neither the event loop
nor the network, ends the process if the holder has not stopped by its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import urllib3
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
        """How long the holder keeps trying to renew before it gives up the Lease."""
        return self.duration * 2 / 3

    @property
    def stop_margin(self) -> float:
        """How long the holder may take to stop acting once it has given up; renew_deadline + stop_margin leaves
        a sixth of the duration for clocks that run at different rates and for the standby's reads."""
        return self.duration / 6


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


EXIT_LEASE_LOST = 75  # EX_TEMPFAIL: the process is to be started again, as a standby


class LeaseLost(RuntimeError):
    """This replica no longer holds the Lease; the message says why."""


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


# What a call through the kubernetes client raises when the API server answers with an error, or not at all.
API_ERRORS = (client.ApiException, urllib3.exceptions.HTTPError, OSError)


class LeaderElector:
    """Acquire, keep and release one Lease. The Kubernetes client is synchronous: calls run in threads."""

    def __init__(self, api: client.ApiClient, config: LeaseConfig) -> None:
        self.api = client.CoordinationV1Api(api)
        self.config = config
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0  # monotonic start of the last write of the Lease that succeeded

    async def _read(self, timeout: float) -> client.V1Lease | None:
        try:
            return await asyncio.to_thread(
                self.api.read_namespaced_lease, self.config.name, self.config.namespace, _request_timeout=timeout
            )
        except client.ApiException as error:
            if is_not_found(error):
                return None
            raise

    async def _write(self, lease: client.V1Lease, spec: client.V1LeaseSpec, timeout: float) -> bool:
        """Replace the Lease with `spec` at the version read; False when another replica wrote first."""
        lease.spec = spec
        try:
            await asyncio.to_thread(
                self.api.replace_namespaced_lease,
                self.config.name,
                self.config.namespace,
                lease,
                _request_timeout=timeout,
            )
        except client.ApiException as error:
            if is_conflict(error):
                return False
            raise
        return True

    async def _create(self, timeout: float) -> bool:
        spec = claimed(client.V1LeaseSpec(), self.config.identity, self.config.duration, datetime.now(UTC))
        lease = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.config.name, namespace=self.config.namespace), spec=spec
        )
        try:
            await asyncio.to_thread(
                self.api.create_namespaced_lease, self.config.namespace, lease, _request_timeout=timeout
            )
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

    async def _bounded(self, timeout: float, attempt: Callable[[float], Awaitable[bool]]) -> bool:
        """`attempt` at writing the Lease, given at most `timeout` seconds (TimeoutError after that); when it
        wrote, the Lease counts as renewed from the moment the attempt started."""
        started = time.monotonic()
        # The threads' own request timeouts end stalled calls; the asyncio timeout also covers the wait for a
        # free thread, which calls hung elsewhere in the process may hold.
        async with asyncio.timeout(timeout):
            wrote = await attempt(timeout)
        if wrote:
            self._renewed_at = started
        return wrote

    async def try_acquire(self, timeout: float | None = None) -> bool:
        """One attempt, of at most `timeout` seconds (default: the period): True when this replica holds the
        Lease afterwards. Raises TimeoutError when the API server did not answer in time."""
        return await self._bounded(timeout or self.config.period, self._acquire_once)

    async def _acquire_once(self, timeout: float) -> bool:
        lease = await self._read(timeout)
        if lease is None:
            return await self._create(timeout)
        spec = lease.spec or client.V1LeaseSpec()
        mine = spec.holder_identity == self.config.identity
        if not mine and not self._expired(spec):
            return False
        previous = spec.holder_identity or "nobody"
        claim = claimed(spec, self.config.identity, self.config.duration, datetime.now(UTC))
        if not await self._write(lease, claim, timeout):
            return False
        if not mine:
            log.info("took over the Lease", extra={"lease": self._where(), "previous_holder": previous})
        return True

    async def _renew_once(self, timeout: float) -> bool:
        lease = await self._read(timeout)
        holder = lease.spec.holder_identity if lease is not None and lease.spec is not None else None
        if lease is None or lease.spec is None or holder != self.config.identity:
            raise LeaseLost(f"Lease {self._where()} is now held by {holder or 'nobody'}")
        claim = claimed(lease.spec, self.config.identity, self.config.duration, datetime.now(UTC))
        return await self._write(lease, claim, timeout)

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
            except (TimeoutError, *API_ERRORS) as error:
                log.warning("cannot read or write the Lease", extra={"lease": self._where(), "error": repr(error)})
            if await _stopped_within(stop, self.config.period):
                break
        return False

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew the Lease every period until `stop` is set; raise LeaseLost when another replica holds it or
        when renewing has failed until the renew deadline (each attempt ends by then, answered or not)."""
        while True:
            deadline = self._renewed_at + self.config.renew_deadline
            if await _stopped_within(stop, min(self.config.period, max(0.0, deadline - time.monotonic()))):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseLost(
                    f"could not renew Lease {self._where()} within the renew deadline "
                    f"({self.config.renew_deadline:.1f} s)"
                )
            try:
                # At most a period, so that an attempt stuck on a dead connection leaves time for another one,
                # on a new connection, before the deadline.
                await self._bounded(min(self.config.period, remaining), self._renew_once)
            except TimeoutError:
                log.warning("cannot renew the Lease: no answer in time", extra={"lease": self._where()})
            except API_ERRORS as error:
                log.warning("cannot renew the Lease", extra={"lease": self._where(), "error": repr(error)})

    @contextlib.contextmanager
    def watchdog(self) -> Iterator[None]:
        """While inside, end the process at once should it still be inside past the renew deadline plus the stop
        margin after the last renewal: the last resort when stopping the work hangs (or the event loop is
        blocked), before a standby could take over. Left by an exception (the Lease lost), it stays armed: the
        process is on its way out, and its other work (threads, the service's own tasks) must end by then too."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.1):
                late = time.monotonic() - (self._renewed_at + self.config.renew_deadline + self.config.stop_margin)
                if late > 0:
                    log.critical(
                        "not stopped by the renew deadline plus the stop margin: exiting now, so that two "
                        "replicas never act at once",
                        extra={"lease": self._where(), "stop_margin": self.config.stop_margin},
                    )
                    os._exit(EXIT_LEASE_LOST)

        thread = threading.Thread(target=watch, name="lease-watchdog", daemon=True)
        thread.start()
        yield
        done.set()
        thread.join()

    async def release(self) -> None:
        """Hand the Lease back so a standby takes over at once (nothing to do when another replica holds it)."""
        timeout = self.config.period
        try:
            async with asyncio.timeout(timeout):
                lease = await self._read(timeout)
                if lease is None or lease.spec is None or lease.spec.holder_identity != self.config.identity:
                    return
                spec = lease.spec
                spec.holder_identity, spec.lease_duration_seconds, spec.renew_time = None, 1, datetime.now(UTC)
                if await self._write(lease, spec, timeout):
                    log.info("released the Lease", extra={"lease": self._where()})
        except (TimeoutError, *API_ERRORS) as error:
            log.warning("cannot release the Lease", extra={"lease": self._where(), "error": repr(error)})

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
