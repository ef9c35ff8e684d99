"""Leader election on a coordination.k8s.io/v1 Lease, by the kubernetes client's own `leaderelection` package.

One replica holds the Lease and works; the others stand by, trying it every period. The election itself is the
library's (`LeaderElection.try_acquire_or_renew` over its `LeaseLock`): a standby takes the Lease over when the
holder hands it back or when the record has not changed for the lease duration as timed on the standby's own
clock, and every write is a replace at the resourceVersion just read, so of two replicas racing for the Lease one
gets a Conflict and stays a standby.

The library's own loops (`LeaderElection.run`) are not used, because they lack what the safety property needs:
a holder that cannot renew for `renew_deadline` gives up, and must have stopped acting `stop_margin` later; both
together are shorter than the lease duration, and both are timed from the start of the last renewal that
succeeded (before the API server wrote it, so before any standby saw it), so the holder has stopped before any
standby could take over: two replicas never act at once. The library's loops block a thread forever (no stop),
put no bound on a call (a half-open connection or a frozen peer hangs the renewal past the deadline), never hand
the Lease back on a clean stop, and have nothing that ends a holder whose work will not stop. So this module
drives the library's single step from asyncio: each attempt bounded in time (its API calls time out within the
period, and the attempt is abandoned at the period), on one thread of its own (the library's state is not
thread-safe), a release that clears `holderIdentity`, and a watchdog thread, which needs neither the event loop
nor the network, that ends the process if the holder has not stopped by its deadline. The library's LeaseLock is
extended only to count `leaseTransitions` (as client-go does, and `kubectl describe lease` shows) and to check a
takeover against the monotonic clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.leaderelection.electionconfig import Config
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from tollgate.runtime.kube import TimeoutApiClient, timeouts
from tollgate.runtime.settings import ControllerSettings

log = logging.getLogger("tollgate.runtime.leader")
# The library logs every standby's every try at INFO ("yet to finish lease_duration"); its warnings still show.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


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

    @property
    def whole_seconds(self) -> int:
        """The duration as the Lease records it and the library times it: whole seconds, rounded up, so that a
        standby never waits less than `duration`."""
        return math.ceil(self.duration)


EXIT_LEASE_LOST = 75  # EX_TEMPFAIL: the process is to be started again, as a standby


class LeaseLost(RuntimeError):
    """This replica no longer holds the Lease; the message says why."""


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


# What a call through the kubernetes client raises when the API server answers with an error, or not at all.
API_ERRORS = (client.ApiException, urllib3.exceptions.HTTPError, OSError)


class _GuardedLeaseLock(LeaseLock):
    """The library's LeaseLock, on the given client, that counts `leaseTransitions` when the holder changes, and
    refuses to take over a record that has not gone unchanged for the lease duration on the monotonic clock (the
    library times expiry with time.time(), which a clock step can move forward)."""

    def __init__(self, api: client.ApiClient, config: LeaseConfig) -> None:
        super().__init__(config.name, config.namespace, config.identity)  # type: ignore[no-untyped-call]
        self.api_instance = client.CoordinationV1Api(api)
        self.duration = config.whole_seconds
        self.seen_holder: str | None = None
        self._seen: tuple[object, ...] | None = None
        self._seen_at = 0.0  # monotonic time the record read last changed

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        found, record = super().get(name, namespace)  # type: ignore[no-untyped-call]
        if found:
            self.seen_holder = record.holder_identity
            seen = (record.holder_identity, record.renew_time, record.acquire_time, record.lease_duration)
            if seen != self._seen:
                self._seen, self._seen_at = seen, time.monotonic()
        return found, record

    def update(self, name: str, namespace: str, record: LeaderElectionRecord) -> bool:
        taking_over = bool(self.seen_holder) and record.holder_identity not in ("", self.seen_holder)
        if taking_over and time.monotonic() - self._seen_at < self.duration:
            log.warning("not taking over a Lease renewed within its duration", extra={"holder": self.seen_holder})
            return False
        return bool(super().update(name, namespace, record))  # type: ignore[no-untyped-call]

    def get_lease_spec(self, record: LeaderElectionRecord, current_spec: Any = None) -> client.V1LeaseSpec:
        previous = current_spec.holder_identity if current_spec is not None else None
        spec: client.V1LeaseSpec = super().get_lease_spec(record, current_spec)  # type: ignore[no-untyped-call]
        if current_spec is not None and record.holder_identity and record.holder_identity != previous:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        return spec


class LeaderElector:
    """Acquire, keep and release one Lease through the library's election step, run on a thread of its own."""

    def __init__(self, api: client.ApiClient, config: LeaseConfig) -> None:
        self.config = config
        # Every call of the election's gives up within a period (urllib3 retries it once, on a new connection).
        bounded = TimeoutApiClient(api.configuration, dataclasses.replace(timeouts(), request=config.period))
        self._lock = _GuardedLeaseLock(bounded, config)
        self._election = LeaderElection(  # type: ignore[no-untyped-call]
            Config(  # type: ignore[no-untyped-call]
                lock=self._lock,
                lease_duration=config.whole_seconds,
                # The library checks these against its own loops, which are not used (see the module's docstring).
                renew_deadline=config.renew_deadline,
                retry_period=max(1.0, config.period),
                onstarted_leading=lambda: None,
                onstopped_leading=None,
            )
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lease-{config.name}")
        self._renewed_at = 0.0  # monotonic start of the last write of the Lease that succeeded

    def _step(self) -> tuple[bool, str | None]:
        """The library's one election step (in the elector's thread): whether this replica holds the Lease now,
        and the holder the Lease named when last read (before this replica's own write)."""
        held = bool(self._election.try_acquire_or_renew())  # type: ignore[no-untyped-call]
        return held, self._lock.seen_holder

    async def _attempt(self, timeout: float) -> tuple[bool, str | None]:
        """One election step, given at most `timeout` seconds (TimeoutError after that); when it holds the Lease,
        the Lease counts as renewed from the moment the step started."""
        started = time.monotonic()
        # The calls' own timeouts end stalled calls; the asyncio timeout also covers the wait for the thread,
        # which an abandoned step may still hold.
        async with asyncio.timeout(timeout):
            held, holder = await asyncio.get_running_loop().run_in_executor(self._thread, self._step)
        if held:
            self._renewed_at = started
        return held, holder

    async def try_acquire(self, timeout: float | None = None) -> bool:
        """One attempt, of at most `timeout` seconds (default: the period): True when this replica holds the
        Lease afterwards. Raises TimeoutError when the API server did not answer in time."""
        held, holder = await self._attempt(timeout or self.config.period)
        if held and holder != self.config.identity:
            log.info("took over the Lease", extra={"lease": self._where(), "previous_holder": holder or "nobody"})
        return held

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
                held, holder = await self._attempt(min(self.config.period, remaining))
            except TimeoutError:
                log.warning("cannot renew the Lease: no answer in time", extra={"lease": self._where()})
                continue
            except API_ERRORS as error:
                log.warning("cannot renew the Lease", extra={"lease": self._where(), "error": repr(error)})
                continue
            if not held and holder != self.config.identity:
                raise LeaseLost(f"Lease {self._where()} is now held by {holder or 'nobody'}")

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

    def _release(self) -> bool:
        """Hand the Lease back through the library's lock, as client-go does: no holder, a one-second duration."""
        found, record = self._lock.get(self.config.name, self.config.namespace)
        if not found or record is None or record.holder_identity != self.config.identity:
            return False
        now = str(datetime.now(UTC))
        released = LeaderElectionRecord("", "1", now, now)  # type: ignore[no-untyped-call]
        return bool(self._lock.update(self.config.name, self.config.namespace, released))

    async def release(self) -> None:
        """Hand the Lease back so a standby takes over at once (nothing to do when another replica holds it)."""
        try:
            async with asyncio.timeout(self.config.period):
                if await asyncio.get_running_loop().run_in_executor(self._thread, self._release):
                    log.info("released the Lease", extra={"lease": self._where()})
        except (TimeoutError, *API_ERRORS) as error:
            log.warning("cannot release the Lease", extra={"lease": self._where(), "error": repr(error)})
        finally:
            self._thread.shutdown(wait=False, cancel_futures=True)

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
