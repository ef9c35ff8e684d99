"""Process-backed Envoy pods: one real Envoy process per running pod that carries ENVOY_PROXY_LABEL.

KWOK simulates every other pod; this plays the kubelet for Envoy pods on the embedded cluster. For each
such pod it reads the bootstrap (a ConfigMap mounted where `-c`/`--config-path` points, or
`--config-yaml`), expands `$(VAR)` from the pod's env (downward API included), fills the node identity
from the pod, binds admin and static listeners to the pod IP, makes its ADS connection from the pod IP (as
from the pod's network namespace: tollgate-xds admits an Envoy only from its pod's IP), and runs Envoy. It
stops the process when the pod goes away, restarts it when it crashes, and reflects both in the pod's Ready
condition. With TOLLGATE_SUPERVISOR_HOSTS_FILE (the embedded kubelet's hosts file), Envoy resolves cluster
Service names.

Run it as `python -m tollgate.testing.supervisor` (the tests and `make dev` do).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from kubernetes import client
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tollgate.models.base import now_rfc3339
from tollgate.models.envoy import (
    ADMIN_PORT,
    ENVOY_CONTAINER,
    ENVOY_PROXY_LABEL,
    LISTENER_ADDRESS_KEY,
    POD_LABELS_KEY,
    POD_NAME_KEY,
    POD_NAMESPACE_KEY,
)
from tollgate.runtime.kube import api_client
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ServiceSettings
from tollgate.testing.envoy import EnvoyError, EnvoyProcess, bind_to_pod
from tollgate.testing.pods import JSON, Watches, condition, container_env, expand, patch_pod_status

log = logging.getLogger("tollgate.testing.supervisor")


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_SUPERVISOR_", extra="ignore")

    service_name: str = "tollgate-envoy-supervisor"
    log_dir: Path = Field(default=Path(".dev/envoy"), description="Where each Envoy's log goes.")
    envoy_log_level: str = "info"
    restart_backoff: float = Field(default=1.0, description="Seconds before restarting a crashed Envoy.")
    start_timeout: float = Field(
        default=90.0, description="Seconds an Envoy may take to become LIVE (an ADS Envoy waits for its first config)."
    )
    hosts_file: Path | None = Field(
        default=None,
        description="Run each Envoy in a mount namespace with this file as /etc/hosts: the embedded kubelet's "
        "(<state_dir>/hosts), which maps cluster Service names (<svc>.<ns>.svc) to the ClusterIPs it serves.",
    )


class BootstrapError(ValueError):
    pass


def envoy_container(pod: JSON) -> JSON:
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == ENVOY_CONTAINER), containers[0])


def _flag(args: list[str], *names: str) -> str | None:
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def bootstrap_source(pod: JSON, args: list[str]) -> tuple[str, str] | str:
    """Inline YAML (`--config-yaml`), or (ConfigMap name, key) for the mounted file `-c` names."""
    inline = _flag(args, "--config-yaml")
    if inline is not None:
        return inline
    path_text = _flag(args, "-c", "--config-path")
    if path_text is None:
        raise BootstrapError("the envoy container has neither -c/--config-path nor --config-yaml")
    path = PurePosixPath(path_text)
    container = envoy_container(pod)
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        mount_path = PurePosixPath(mount["mountPath"])
        if path == mount_path or mount_path in path.parents:
            config_map = volumes.get(mount["name"], {}).get("configMap")
            if config_map is None:
                raise BootstrapError(f"{path_text} is mounted from volume {mount['name']}, which is not a ConfigMap")
            key = mount.get("subPath") or str(path.relative_to(mount_path))
            return config_map["name"], key
    raise BootstrapError(f"no volumeMount of the envoy container holds {path_text}")


def _rebind(node: Any, address: str) -> None:
    """Static listeners on 0.0.0.0 move to the pod IP (pods here share the machine's network)."""
    if isinstance(node, dict):
        socket = node.get("socket_address")
        if isinstance(socket, dict) and socket.get("address") in ("0.0.0.0", "::"):
            socket["address"] = address
        for value in node.values():
            _rebind(value, address)
    elif isinstance(node, list):
        for value in node:
            _rebind(value, address)


def ads_clusters(bootstrap: JSON) -> list[str]:
    """The static clusters the bootstrap's ADS config streams from (envoy_grpc cluster names)."""
    ads = bootstrap.get("dynamic_resources", {}).get("ads_config", {})
    services = ads.get("grpc_services", []) if isinstance(ads, dict) else []
    return [str(s["envoy_grpc"]["cluster_name"]) for s in services if "cluster_name" in s.get("envoy_grpc", {})]


def prepare_bootstrap(pod: JSON, text: str, args: list[str], env: dict[str, str]) -> JSON:
    """The bootstrap Envoy runs with: identity from the pod, admin and listeners on the pod IP, and its xDS
    connections made from the pod IP (as from a pod's network namespace; tollgate-xds checks it)."""
    bootstrap = yaml.safe_load(expand(text, env)) or {}
    if not isinstance(bootstrap, dict):
        raise BootstrapError("the bootstrap is not a YAML mapping")
    meta, pod_ip = pod["metadata"], pod["status"]["podIP"]
    node = bootstrap.setdefault("node", {})
    node["id"] = _flag(args, "--service-node") or node.get("id") or f"{meta['name']}.{meta['namespace']}"
    node["cluster"] = _flag(args, "--service-cluster") or node.get("cluster") or meta["namespace"]
    node.setdefault("metadata", {}).update(
        {
            POD_NAME_KEY: meta["name"],
            POD_NAMESPACE_KEY: meta["namespace"],
            POD_LABELS_KEY: meta.get("labels", {}),
            LISTENER_ADDRESS_KEY: pod_ip,
        }
    )
    bootstrap["admin"] = {"address": {"socket_address": {"address": pod_ip, "port_value": ADMIN_PORT}}}
    for listener in bootstrap.get("static_resources", {}).get("listeners", []):
        _rebind(listener.get("address"), pod_ip)
    for cluster in ads_clusters(bootstrap):
        bind_to_pod(bootstrap, pod_ip, cluster)
    return bootstrap


@dataclass
class Managed:
    uid: str
    namespace: str
    name: str
    bootstrap: JSON
    admin_host: str
    log_path: Path
    envoy: EnvoyProcess | None = None
    restarts: int = 0
    task: asyncio.Task[None] | None = None
    stopping: bool = field(default=False)


class Supervisor:
    def __init__(self, api: client.ApiClient, settings: Settings) -> None:
        self.core = client.CoreV1Api(api)
        self.settings = settings
        self.managed: dict[str, Managed] = {}
        self.synced = False

    def _is_running(self, pod: JSON) -> bool:
        return (
            pod["metadata"].get("deletionTimestamp") is None
            and pod["status"].get("phase") == "Running"
            and bool(pod["status"].get("podIP"))
        )

    async def reconcile(self, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        if self._is_running(pod):
            if uid not in self.managed:
                await self._launch(pod)
        elif uid in self.managed:
            await self._stop(uid, "pod is no longer running")

    async def forget_missing(self, present: set[str]) -> None:
        for uid in set(self.managed) - present:
            await self._stop(uid, "pod is gone")

    async def forget(self, uid: str, why: str) -> None:
        if uid in self.managed:
            await self._stop(uid, why)

    async def _bootstrap(self, pod: JSON) -> JSON:
        container = envoy_container(pod)
        env = container_env(pod, container)
        args = [expand(arg, env) for arg in [*container.get("command", [])[1:], *container.get("args", [])]]
        source = bootstrap_source(pod, args)
        if isinstance(source, str):
            text = source
        else:
            name, key = source
            config_map = await asyncio.to_thread(
                self.core.read_namespaced_config_map, name, pod["metadata"]["namespace"]
            )
            data: dict[str, str] = config_map.data or {}
            if key not in data:
                raise BootstrapError(f"ConfigMap {name} has no key {key}")
            text = data[key]
        return prepare_bootstrap(pod, text, args, env)

    async def _launch(self, pod: JSON) -> None:
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        try:
            bootstrap = await self._bootstrap(pod)
        except (BootstrapError, client.ApiException) as error:
            log.error("cannot run Envoy for %s: %s", where, error)
            await self._set_ready(pod, False, "BootstrapInvalid", str(error))
            return
        log_path = self.settings.log_dir / f"{meta['namespace']}_{meta['name']}.log"
        managed = Managed(meta["uid"], meta["namespace"], meta["name"], bootstrap, pod["status"]["podIP"], log_path)
        self.managed[meta["uid"]] = managed
        managed.task = asyncio.create_task(self._keep_running(managed, pod), name=f"envoy {where}")

    async def _keep_running(self, managed: Managed, pod: JSON) -> None:
        where = f"{managed.namespace}/{managed.name}"
        while not managed.stopping:
            envoy = managed.envoy = EnvoyProcess(
                managed.bootstrap,
                admin_host=managed.admin_host,
                admin_port=ADMIN_PORT,
                log_path=managed.log_path,
                log_level=self.settings.envoy_log_level,
                hosts_file=self.settings.hosts_file,
            )
            try:
                await envoy.start(timeout=self.settings.start_timeout)
            except EnvoyError as error:
                log.error("Envoy for %s failed to start: %s", where, error)
                await self._set_ready(pod, False, "EnvoyFailed", str(error)[-1000:], managed.restarts)
            else:
                log.info(
                    "Envoy for %s is live", where, extra={"pid": managed.envoy.pid, "admin": managed.envoy.admin_url}
                )
                await self._set_ready(pod, True, "EnvoyLive", f"pid {managed.envoy.pid}", managed.restarts)
                code = await managed.envoy.wait()
                if managed.stopping:
                    return
                log.warning("Envoy for %s exited with %s; restarting", where, code)
                await self._set_ready(pod, False, "EnvoyExited", f"exit code {code}", managed.restarts, code)
            managed.restarts += 1
            await asyncio.sleep(self.settings.restart_backoff)

    async def _stop(self, uid: str, why: str) -> None:
        managed = self.managed.pop(uid)
        managed.stopping = True
        log.info("stopping Envoy for %s/%s: %s", managed.namespace, managed.name, why)
        if managed.task is not None:
            managed.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await managed.task
        if managed.envoy is not None:
            await managed.envoy.stop()

    async def stop_all(self) -> None:
        for uid in list(self.managed):
            await self._stop(uid, "supervisor stopping")

    async def _set_ready(
        self, pod: JSON, ready: bool, reason: str, message: str, restarts: int = 0, exit_code: int | None = None
    ) -> None:
        now = now_rfc3339()
        container = envoy_container(pod)
        state: JSON = (
            {"running": {"startedAt": now}}
            if ready
            else {
                "terminated": {
                    "exitCode": exit_code if exit_code is not None else 1,
                    "reason": reason,
                    "finishedAt": now,
                }
            }
        )
        status = {
            "conditions": [condition(kind, ready, reason, message, now) for kind in ("Ready", "ContainersReady")],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                }
            ],
        }
        await patch_pod_status(self.core, pod, status)


async def main(settings: Settings, context: ServiceContext) -> None:
    supervisor = Supervisor(api_client(settings.kubeconfig), settings)
    context.health.add_readiness_check("pods", lambda: supervisor.synced or "pods not listed yet")
    watches = Watches()
    watches.start("pods", supervisor.core.list_pod_for_all_namespaces, label_selector=ENVOY_PROXY_LABEL)
    try:
        while (event := await watches.next(context.stop)) is not None:
            _, kind, obj = event
            if kind == "LIST":
                pods = obj["items"]
                for pod in pods:
                    await supervisor.reconcile(pod)
                await supervisor.forget_missing({pod["metadata"]["uid"] for pod in pods})
                supervisor.synced = True
            elif kind == "DELETED":
                await supervisor.forget(obj["metadata"]["uid"], "pod deleted")
            else:
                await supervisor.reconcile(obj)
    finally:
        watches.close()
        await supervisor.stop_all()


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.testing.supervisor", __doc__ or "", Settings, main))
