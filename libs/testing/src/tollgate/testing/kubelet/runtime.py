"""The kubelet's I/O: a worker per pod (volumes, tokens, status, termination) and a runner per container
(start in its own namespaces, probes, restarts with back-off)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes import client
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tollgate.models.base import now_rfc3339
from tollgate.runtime.backoff import Backoff
from tollgate.runtime.events import EventRecorder
from tollgate.runtime.kube import object_reference, raw_json
from tollgate.runtime.settings import ServiceSettings
from tollgate.testing.kubelet.container import LaunchPlan
from tollgate.testing.kubelet.hosts import hosts_text, rewrite
from tollgate.testing.kubelet.image import ImageConfig, ImageError, resolve
from tollgate.testing.kubelet.probes import Probe, Threshold, check, parse_probe
from tollgate.testing.kubelet.proxy import ServiceProxy
from tollgate.testing.kubelet.spec import ContainerConfigError, env_references, launch_plan, unsupported
from tollgate.testing.kubelet.stages import is_kubelet_pod
from tollgate.testing.kubelet.status import (
    ContainerView,
    pod_status,
    should_restart,
    terminated,
    waiting,
)
from tollgate.testing.kubelet.volumes import (
    Objects,
    Payload,
    TokenSource,
    VolumeError,
    payload,
    pod_fs_user,
    references,
    token_sources,
    write_atomic,
)
from tollgate.testing.pods import JSON, EnvError, container_env, decoded, patch_pod_status

log = logging.getLogger("tollgate.testing.kubelet")
COMPONENT = "tollgate-kubelet"
# The kubelet refreshes a projected token once 80% of its lifetime has passed, or when it is 24 hours old.
TOKEN_REFRESH_FRACTION = 0.8
TOKEN_MAX_AGE_SECONDS = 24 * 3600


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_KUBELET_", extra="ignore")

    service_name: str = "tollgate-kubelet"
    state_dir: Path = Field(
        default=Path(".dev/kubelet"),
        description="Volumes, launch specs and the hosts file (<state_dir>/hosts, for the supervisor's Envoys too).",
    )
    log_dir: Path = Field(default=Path(".dev/pods"), description="Container logs: <namespace>_<pod>_<container>.log.")
    image_prefix: str = Field(
        default="ghcr.io/tollgate/",
        description="Images <prefix><service>:<tag> run services/<service> of the checkout.",
    )
    restart_backoff_base: float = Field(default=10.0, gt=0, description="First CrashLoopBackOff delay, in seconds.")
    restart_backoff_max: float = Field(default=300.0, gt=0, description="Longest CrashLoopBackOff delay, in seconds.")
    sync_seconds: float = Field(
        default=2.0, gt=0, description="How often Secret, ConfigMap and token volumes are brought up to date."
    )
    shutdown_grace_seconds: float = Field(
        default=10.0, ge=0, description="When the kubelet stops: the most a container gets between SIGTERM and SIGKILL."
    )

    @property
    def hosts_file(self) -> Path:
        return self.state_dir / "hosts"


@dataclass
class Node:
    """What every pod worker shares."""

    core: client.CoreV1Api
    settings: Settings
    images: Mapping[str, ImageConfig]
    service_env: Mapping[str, str]
    podnet: Path
    reachable: list[str]  # the image's files (interpreter, venv, checkout, shim): see container.py
    session: aiohttp.ClientSession
    events: EventRecorder  # posts as COMPONENT


def _where(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class ContainerRunner:
    """One container of a pod: started, probed, restarted with back-off per the restart policy, stopped."""

    def __init__(self, worker: PodWorker, container: JSON, image: ImageConfig, view: ContainerView) -> None:
        self.worker = worker
        self.container = container
        self.image = image
        self.view = view
        self.directory = worker.directory / "containers" / container["name"]
        self.process: asyncio.subprocess.Process | None = None
        self._stopping = asyncio.Event()
        self._grace = 0.0
        self._crashes = 0  # in a row: the back-off exponent
        self.task = asyncio.create_task(self._run(), name=f"container {_where(worker.pod)}/{container['name']}")

    @property
    def _log_path(self) -> Path:
        meta = self.worker.pod["metadata"]
        return self.worker.node.settings.log_dir / f"{meta['namespace']}_{meta['name']}_{self.container['name']}.log"

    async def _sleep(self, seconds: float) -> bool:
        """False when the container is being stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return not self._stopping.is_set()

    def _update(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self.view, name, value)
        self.worker.changed()

    async def _prepare(self) -> tuple[LaunchPlan, dict[str, Probe]]:
        plan = await self.worker.plan(self.container, self.image)
        pod_ip = self.worker.pod["status"]["podIP"]
        probes = {
            kind: parse_probe(self.container[kind], self.container, pod_ip)
            for kind in ("startupProbe", "readinessProbe", "livenessProbe")
            if self.container.get(kind)
        }
        return plan, probes

    async def _spawn(self, plan: LaunchPlan) -> asyncio.subprocess.Process:
        rootfs = self.directory / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        spec = self.directory / "launch.json"
        spec.touch(mode=0o600)
        spec.write_text(
            json.dumps({"plan": plan.to_json(), "rootfs": str(rootfs), "reachable": self.worker.node.reachable})
        )
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as output:
            return await asyncio.create_subprocess_exec(
                "unshare", "--mount", "--uts", "--propagation", "private", "--",
                sys.executable, "-m", "tollgate.testing.kubelet.container", str(spec),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                start_new_session=True,  # a Ctrl-C meant for the kubelet reaches the containers through it
            )  # fmt: skip

    async def _run(self) -> None:
        where = f"{_where(self.worker.pod)} container {self.container['name']}"
        policy = self.worker.pod["spec"].get("restartPolicy", "Always")
        while not self._stopping.is_set():
            try:
                plan, probes = await self._prepare()
            except (ContainerConfigError, EnvError, VolumeError) as error:
                if self.view.state != waiting("CreateContainerConfigError", str(error)):  # not again each retry
                    log.error("cannot create %s: %s", where, error)
                self._update(state=waiting("CreateContainerConfigError", str(error)))
                await self.worker.event("Warning", "Failed", f"Error: {error}", self.container, once=True)
                await self._sleep(self.worker.node.settings.sync_seconds)
                continue
            if self._stopping.is_set():
                return
            started_at, started = now_rfc3339(), time.monotonic()
            try:
                self.process = await self._spawn(plan)
            except OSError as error:  # unshare or the log file
                log.error("cannot start %s: %s", where, error)
                self._update(state=waiting("RunContainerError", str(error)))
                await self._sleep(self.worker.backoff.pause(self._crashes))
                self._crashes += 1
                continue
            if self._stopping.is_set():  # stop() came while it was being spawned
                await self._terminate(self.process, self._grace)
            log.info("started %s", where, extra={"pid": self.process.pid, "argv": plan.argv, "uid": plan.uid})
            await self.worker.event("Normal", "Started", f"Started container {self.container['name']}", self.container)
            self._update(state={"running": {"startedAt": started_at}}, started="startupProbe" not in probes)
            self._update(ready=self.view.started and "readinessProbe" not in probes)
            probing = asyncio.create_task(self._probe(self.process, probes))
            code = await self.process.wait()
            code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a container runtime says
            with contextlib.suppress(ProcessLookupError):  # what it left behind goes with it, as with a cgroup
                os.killpg(self.process.pid, signal.SIGKILL)
            probing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probing
            state = terminated(code, started_at, now_rfc3339())
            if self._stopping.is_set() or not should_restart(policy, code):
                self._update(state=state, ready=False, started=False, finished=not self._stopping.is_set())
                log.info("%s exited with %s", where, code)
                return
            # Like the kubelet, forget earlier crashes once a run lasted twice the longest back-off.
            ran = time.monotonic() - started
            self._crashes = 0 if ran >= 2 * self.worker.backoff.cap else self._crashes
            delay = self.worker.backoff.pause(self._crashes)
            self._crashes += 1
            name = self.container["name"]
            message = f"back-off {delay:g}s restarting failed container={name} pod={_where(self.worker.pod)}"
            log.warning("%s exited with %s; %s", where, code, message)
            self._update(state=waiting("CrashLoopBackOff", message), last_state=state, ready=False, started=False)
            await self.worker.event("Warning", "BackOff", message, self.container)
            if not await self._sleep(delay):
                return
            self._update(restart_count=self.view.restart_count + 1)

    async def _probe(self, process: asyncio.subprocess.Process, probes: dict[str, Probe]) -> None:
        """Startup first (when there is one), then readiness and liveness side by side."""
        if "startupProbe" in probes:
            if not await self._repeat(process, probes["startupProbe"], passing=False, until_passing=True):
                return
            self._update(started=True, ready="readinessProbe" not in probes)
        await asyncio.gather(
            *[
                self._repeat(process, probes[kind], passing=kind == "livenessProbe", until_passing=False)
                for kind in ("readinessProbe", "livenessProbe")
                if kind in probes
            ]
        )

    async def _repeat(
        self, process: asyncio.subprocess.Process, probe: Probe, passing: bool, until_passing: bool
    ) -> bool:
        """Run `probe` every period. A readiness probe sets `ready`; a startup or liveness probe that fails
        failureThreshold times in a row kills the process (the run loop restarts it). True once a startup
        probe passes."""
        kind = "Startup" if until_passing else "Liveness" if passing else "Readiness"
        threshold = Threshold(probe, passing)
        await asyncio.sleep(probe.initial_delay)
        while True:
            failure = await check(probe, self.worker.node.session)
            result = threshold.observe(failure is None)
            if failure is not None:
                log.debug("%s probe of %s failed: %s", kind, _where(self.worker.pod), failure)
                if threshold.failures == probe.failure_threshold:
                    await self.worker.event("Warning", "Unhealthy", f"{kind} probe failed: {failure}", self.container)
            if kind == "Readiness" and result != self.view.ready:
                self._update(ready=result)
            if until_passing and result:
                return True
            if kind != "Readiness" and threshold.failures >= probe.failure_threshold:
                message = f"Container {self.container['name']} failed {kind.lower()} probe, will be restarted"
                await self.worker.event("Normal", "Killing", message, self.container)
                await self._terminate(process, self.worker.grace())
                return False
            await asyncio.sleep(probe.period)

    @staticmethod
    async def _terminate(process: asyncio.subprocess.Process, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def stop(self, grace: float) -> None:
        self._grace = grace
        self._stopping.set()
        if self.process is not None:
            await self._terminate(self.process, grace)
        await self.task


class PodWorker:
    """One running pod: its volumes kept current, its containers run, its status patched, its end carried out."""

    def __init__(self, node: Node, pod: JSON) -> None:
        self.node = node
        self.pod = pod
        self.directory = node.settings.state_dir / "pods" / pod["metadata"]["uid"]
        counts = {s["name"]: s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or []}
        self.views = [ContainerView(c["name"], c["image"], counts.get(c["name"], 0)) for c in pod["spec"]["containers"]]
        self.runners: list[ContainerRunner] = []
        self.conditions: list[JSON] = pod["status"].get("conditions") or []
        self.terminating = False
        self._written: dict[str, Payload] = {}
        self._posted: set[tuple[str, str, str]] = set()
        self._tokens: dict[TokenSource, tuple[str, float]] = {}
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        # CrashLoopBackOff: base, doubled for each crash in a row, at most cap; no jitter, as the kubelet's.
        self.backoff = Backoff(node.settings.restart_backoff_base, node.settings.restart_backoff_max, jitter=0)
        self.task = asyncio.create_task(self._run(), name=f"pod {_where(pod)}")
        self._reporter = asyncio.create_task(self._report(), name=f"status {_where(pod)}")

    def changed(self) -> None:
        self._changed.set()

    def grace(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        return float(meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30)))

    async def event(
        self, type_: str, reason: str, message: str, container: JSON | None = None, once: bool = False
    ) -> None:
        """A core/v1 Event on the pod, as the kubelet posts them (best effort); with `once`, not again for a
        condition that persists (a retry that fails the same way)."""
        key = (reason, message, container["name"] if container else "")
        if once and key in self._posted:
            return
        self._posted.add(key)
        involved = {**object_reference(self.pod), "apiVersion": "v1", "kind": "Pod"}
        if container is not None:
            involved["fieldPath"] = f"spec.containers{{{container['name']}}}"
        await self.node.events.post(involved, type_, reason, message, host=self.pod["spec"].get("nodeName", ""))

    async def _objects(self, wanted: set[tuple[str, str]]) -> Objects:
        """The Secrets and ConfigMaps (kind, name) of the pod's namespace, None for those that do not exist."""
        namespace = self.pod["metadata"]["namespace"]
        read = {"Secret": self.node.core.read_namespaced_secret, "ConfigMap": self.node.core.read_namespaced_config_map}
        found: dict[tuple[str, str], JSON | None] = {}
        for kind, name in sorted(wanted):
            try:
                found[(kind, name)] = raw_json(
                    await asyncio.to_thread(read[kind], name, namespace, _preload_content=False)
                )
            except client.ApiException as error:
                if error.status != 404:
                    raise VolumeError(f"cannot read {kind} {name}: {error.reason}") from error
                found[(kind, name)] = None
        return found

    def volume_dirs(self) -> dict[str, Path]:
        dirs = {}
        for volume in self.pod["spec"].get("volumes", []):
            host_path = volume.get("hostPath")
            dirs[volume["name"]] = Path(host_path["path"]) if host_path else self.directory / "volumes" / volume["name"]
        return dirs

    async def plan(self, container: JSON, image: ImageConfig) -> LaunchPlan:
        """How `container` runs now: its env read afresh (Secrets and ConfigMaps included), as at each start."""
        objects = await self._objects(env_references(container))

        def lookup(kind: str, name: str) -> Mapping[str, str] | None:
            obj = objects.get((kind, name))
            if obj is None:
                return None
            return decoded(obj) if kind == "Secret" else obj.get("data") or {}

        env = container_env(self.pod, container, lookup, self.node.service_env)
        return launch_plan(
            self.pod,
            container,
            image,
            {**self.node.service_env, **env},
            self.volume_dirs(),
            self.node.settings.hosts_file,
            self.node.podnet,
        )

    async def _token(self, source: TokenSource) -> str:
        """A token of the pod's ServiceAccount, bound to the pod (TokenRequest), refreshed as the kubelet does."""
        cached = self._tokens.get(source)
        if cached is not None and time.monotonic() < cached[1]:
            return cached[0]
        meta = self.pod["metadata"]
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [source.audience] if source.audience else [],
                "expirationSeconds": source.expiration_seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
            },
        }
        account = self.pod["spec"].get("serviceAccountName") or "default"
        try:
            response = await asyncio.to_thread(
                self.node.core.create_namespaced_service_account_token,
                account,
                meta["namespace"],
                cast(client.AuthenticationV1TokenRequest, request),
                _preload_content=False,
            )
        except client.ApiException as error:
            raise VolumeError(f"cannot get a token for ServiceAccount {account}: {error.reason}") from error
        status = raw_json(response)["status"]
        issued = time.time()
        lifetime = datetime.fromisoformat(status["expirationTimestamp"].replace("Z", "+00:00")).timestamp() - issued
        refresh = time.monotonic() + min(lifetime * TOKEN_REFRESH_FRACTION, TOKEN_MAX_AGE_SECONDS)
        self._tokens[source] = (status["token"], refresh)
        return str(status["token"])

    async def sync_volumes(self) -> None:
        """Bring every volume up to date (written only when its content changed); VolumeError when one cannot be."""
        volumes = self.pod["spec"].get("volumes", [])
        objects = await self._objects(set().union(*(references(v) for v in volumes)))
        tokens = {source: await self._token(source) for v in volumes for source in token_sources(v)}
        security = self.pod["spec"].get("securityContext") or {}
        fs_group, fs_user = security.get("fsGroup"), pod_fs_user(self.pod)
        dirs = self.volume_dirs()
        for volume in volumes:
            directory = dirs[volume["name"]]
            if "emptyDir" in volume:
                if not directory.exists():
                    directory.mkdir(parents=True)
                    directory.chmod(0o777)
            elif "hostPath" not in volume:
                if not {"secret", "configMap", "downwardAPI", "projected"} & volume.keys():
                    kinds = sorted(set(volume) - {"name"})
                    raise VolumeError(
                        f"volume {volume['name']}: {kinds} volumes are not supported by the embedded kubelet"
                    )
                files = payload(volume, self.pod, objects, tokens, fs_user, fs_group)
                if self._written.get(volume["name"]) != files:
                    write_atomic(directory, files, fs_group)
                    self._written[volume["name"]] = files

    async def _run(self) -> None:
        where = _where(self.pod)
        problem = unsupported(self.pod)
        images: dict[str, ImageConfig] = {}
        for container, view in zip(self.pod["spec"]["containers"], self.views, strict=True):
            try:
                images[container["name"]] = resolve(
                    container["image"], self.node.settings.image_prefix, self.node.images
                )
            except ImageError as error:
                log.error("cannot run %s: %s", where, error)
                view.state = waiting("ErrImagePull", str(error))
                await self.event("Warning", "Failed", f"Failed to pull image: {error}", container)
            if problem is not None:
                view.state = waiting("CreateContainerConfigError", problem)
        if problem is not None or len(images) < len(self.views):
            self.changed()
            await self._stop.wait()
            return
        while True:
            try:
                await self.sync_volumes()
                break
            except (VolumeError, OSError) as error:
                if self.views[0].state != waiting("ContainerCreating", str(error)):  # not again each retry
                    log.warning("cannot set up the volumes of %s: %s", where, error)
                await self.event("Warning", "FailedMount", str(error), once=True)
                for view in self.views:
                    view.state = waiting("ContainerCreating", str(error))
                self.changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.node.settings.sync_seconds)
            if self._stop.is_set():
                return
        self.runners = [
            ContainerRunner(self, container, images[container["name"]], view)
            for container, view in zip(self.pod["spec"]["containers"], self.views, strict=True)
        ]
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.node.settings.sync_seconds)
            try:
                await self.sync_volumes()
            except (VolumeError, OSError) as error:
                log.warning("cannot update the volumes of %s: %s", where, error)

    async def _report(self) -> None:
        """Patch the pod's status whenever a container's changes."""
        last: JSON | None = None
        while True:
            await self._changed.wait()
            self._changed.clear()
            status = pod_status(self.views, self.conditions, now_rfc3339())
            if status != last:
                self.conditions = status["conditions"]
                await patch_pod_status(self.node.core, self.pod, status)
                last = status

    async def stop(self, grace: float) -> None:
        """Stop every container (SIGTERM, SIGKILL after `grace`) and the worker; the pod's status says so."""
        self._stop.set()
        await asyncio.gather(*(runner.stop(grace) for runner in self.runners))
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self._reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reporter
        if self.runners:
            await patch_pod_status(self.node.core, self.pod, pod_status(self.views, self.conditions, now_rfc3339()))

    async def terminate(self) -> None:
        """The pod is being deleted: stop its containers within its grace period, then delete it for good
        (grace 0, this pod's uid only), as the kubelet does once nothing runs any more."""
        self.terminating = True
        grace = self.grace()
        log.info("pod %s is being deleted: stopping its containers (grace %ss)", _where(self.pod), grace)
        for runner in self.runners:
            await self.event("Normal", "Killing", f"Stopping container {runner.container['name']}", runner.container)
        await self.stop(grace)
        await delete_now(self.node.core, self.pod)

    def cleanup(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


async def delete_now(core: client.CoreV1Api, pod: JSON) -> None:
    """Delete `pod` for good (grace 0, this uid only): what the kubelet does once none of its containers runs."""
    meta = pod["metadata"]
    options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
    try:
        await asyncio.to_thread(
            core.delete_namespaced_pod, meta["name"], meta["namespace"], body=cast(client.V1DeleteOptions, options)
        )
    except client.ApiException as error:
        if error.status not in (404, 409):
            log.warning("cannot delete pod %s: %s", _where(pod), error.reason)


def _apply(cache: dict[str, JSON], kind: str, obj: JSON) -> None:
    """A watch event into `cache` (by uid); LIST replaces it."""
    if kind == "LIST":
        cache.clear()
        cache.update((item["metadata"]["uid"], item) for item in obj["items"])
    elif kind == "DELETED":
        cache.pop(obj["metadata"]["uid"], None)
    else:
        cache[obj["metadata"]["uid"]] = obj


class Kubelet:
    """Runs the pods that are its own (stages.is_kubelet_pod); serves every Service's ClusterIP (proxy.py) and
    keeps the hosts file, from every pod and Service."""

    def __init__(self, node: Node, api_address: str, api_port: int) -> None:
        self.node = node
        self.api_address = api_address
        self.workers: dict[str, PodWorker] = {}
        self.pods: dict[str, JSON] = {}
        self.services: dict[str, JSON] = {}
        self.proxy = ServiceProxy(self.services.values, self.pods.values, (api_address, api_port))
        self.synced = False
        self._terminating: set[asyncio.Task[None]] = set()

    def write_hosts(self) -> None:
        hostnames = {
            worker.pod["spec"].get("hostname") or worker.pod["metadata"]["name"]: worker.pod["status"]["podIP"]
            for worker in self.workers.values()
        }
        text = hosts_text(self.services.values(), self.pods.values(), self.api_address, hostnames)
        if rewrite(self.node.settings.hosts_file, text):
            log.debug("hosts file rewritten")

    async def on_service(self, kind: str, obj: JSON) -> None:
        _apply(self.services, kind, obj)
        await self.proxy.sync()
        self.write_hosts()

    async def on_pod(self, kind: str, obj: JSON) -> None:
        _apply(self.pods, kind, obj)
        if kind == "LIST":
            mine = [pod for pod in obj["items"] if is_kubelet_pod(pod)]
            for pod in mine:
                await self._reconcile(pod)
            for uid in set(self.workers) - {pod["metadata"]["uid"] for pod in mine}:
                await self._forget(uid, grace=0)
            self.synced = True
        elif not is_kubelet_pod(obj):
            pass
        elif kind == "DELETED":
            grace = float(obj["metadata"].get("deletionGracePeriodSeconds", 0))
            await self._forget(obj["metadata"]["uid"], grace)
        else:
            await self._reconcile(obj)
        self.write_hosts()

    async def _reconcile(self, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if pod["metadata"].get("deletionTimestamp"):
            if worker is None:
                await delete_now(self.node.core, pod)
            elif not worker.terminating:
                task = asyncio.create_task(self._terminate(worker), name=f"terminate {_where(pod)}")
                self._terminating.add(task)
                task.add_done_callback(self._terminating.discard)
        elif worker is not None:
            worker.pod = pod
        elif pod["status"].get("podIP") and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            log.info("running pod %s", _where(pod), extra={"pod_ip": pod["status"]["podIP"]})
            self.workers[uid] = PodWorker(self.node, pod)

    async def _terminate(self, worker: PodWorker) -> None:
        await worker.terminate()
        self._drop(worker)

    async def _forget(self, uid: str, grace: float) -> None:
        worker = self.workers.get(uid)
        if worker is not None and not worker.terminating:
            await worker.stop(grace)
            self._drop(worker)

    def _drop(self, worker: PodWorker) -> None:
        if self.workers.get(worker.pod["metadata"]["uid"]) is worker:
            del self.workers[worker.pod["metadata"]["uid"]]
        worker.cleanup()
        self.write_hosts()

    async def stop_all(self) -> None:
        """Stop every container (the pods stay; a kubelet started again runs them again) and every listener."""
        self.proxy.close()
        grace = self.node.settings.shutdown_grace_seconds
        await asyncio.gather(*(w.stop(min(grace, w.grace())) for w in list(self.workers.values())))
        await asyncio.gather(*self._terminating, return_exceptions=True)
