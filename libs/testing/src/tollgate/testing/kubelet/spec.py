"""Pod spec -> launch plan, as a kubelet and a container runtime would read it (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from tollgate.testing.kubelet.container import LaunchPlan, Mount
from tollgate.testing.kubelet.image import ImageConfig
from tollgate.testing.pods import JSON, expand

# The variable the podnet shim (hack/podnet/podnet.c) reads: the address that replaces a wildcard bind().
POD_IP_VARIABLE = "TOLLGATE_POD_IP"


class ContainerConfigError(ValueError):
    """The container cannot be created as specified (the kubelet's CreateContainerConfigError)."""


def service_env(api_url: str) -> dict[str, str]:
    """What a kubelet derives from the `kubernetes` Service for every container (the in-cluster config reads
    KUBERNETES_SERVICE_HOST/PORT); here the API server's own address, since no ClusterIP is routed."""
    parts = urlsplit(api_url)
    port = str(parts.port or 443)
    return {
        "KUBERNETES_SERVICE_HOST": parts.hostname or "",
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
    }


def command_line(image: ImageConfig, container: JSON, env: Mapping[str, str]) -> tuple[str, ...]:
    """Kubernetes' rules: `command` replaces the ENTRYPOINT (and drops the CMD), `args` replace the CMD;
    $(VAR) in either expands from the container's env."""
    if container.get("command"):
        words = [*container["command"], *container.get("args", [])]
    else:
        words = [*image.entrypoint, *(container.get("args") or image.cmd)]
    if not words:
        raise ContainerConfigError("no command specified: neither the image nor the container has one")
    return tuple(expand(word, env) for word in words)


def identity(pod: JSON, container: JSON, image: ImageConfig) -> tuple[int, int, tuple[int, ...]]:
    """(uid, gid, supplementary groups): the container's securityContext over the pod's over the image's USER;
    fsGroup and supplementalGroups join the groups."""
    pod_context = pod["spec"].get("securityContext") or {}
    context = {**pod_context, **(container.get("securityContext") or {})}
    uid = context.get("runAsUser", image.user if image.user is not None else 0)
    gid = context.get("runAsGroup", image.group if image.group is not None else 0)
    if context.get("runAsNonRoot") and uid == 0:
        raise ContainerConfigError("container has runAsNonRoot and image will run as root")
    groups = [pod_context["fsGroup"]] if "fsGroup" in pod_context else []
    groups += [g for g in pod_context.get("supplementalGroups", []) if g not in groups]
    return uid, gid, tuple(groups)


def volume_mounts(container: JSON, volume_dirs: Mapping[str, Path], env: Mapping[str, str]) -> tuple[Mount, ...]:
    mounts = []
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volume_dirs:
            raise ContainerConfigError(f'volumeMount "{mount["name"]}" names no volume of the pod')
        sub_path = mount.get("subPath") or expand(mount.get("subPathExpr", ""), env)
        source = volume_dirs[mount["name"]] / sub_path if sub_path else volume_dirs[mount["name"]]
        mounts.append(Mount(str(source), mount["mountPath"], bool(mount.get("readOnly"))))
    return tuple(mounts)


def unsupported(pod: JSON) -> str | None:
    """What of the pod this kubelet cannot run, if anything."""
    if pod["spec"].get("initContainers"):
        return "init containers are not supported by the embedded kubelet"
    for container in pod["spec"]["containers"]:
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if "exec" in (container.get(kind) or {}):
                return f"container {container['name']}: exec probes are not supported by the embedded kubelet"
    return None


def launch_plan(
    pod: JSON,
    container: JSON,
    image: ImageConfig,
    env: Mapping[str, str],
    volume_dirs: Mapping[str, Path],
    hosts_file: Path,
    podnet: Path,
) -> LaunchPlan:
    """How `container` of `pod` runs. `env` is the container's env (service env included, see container_env);
    the image's ENV comes under it. The podnet shim is preloaded with the pod IP, and `hosts_file` is /etc/hosts."""
    process_env = {**dict(image.env), "HOSTNAME": pod["metadata"]["name"], **env}
    preload = " ".join(filter(None, [str(podnet), process_env.get("LD_PRELOAD")]))
    process_env |= {"LD_PRELOAD": preload, POD_IP_VARIABLE: pod["status"]["podIP"]}
    process_env.setdefault("HOME", "/")
    uid, gid, groups = identity(pod, container, image)
    context = container.get("securityContext") or {}
    mounts = (*volume_mounts(container, volume_dirs, env), Mount(str(hosts_file), "/etc/hosts", read_only=True))
    return LaunchPlan(
        argv=command_line(image, container, env),
        env=process_env,
        cwd=container.get("workingDir") or image.workdir,
        hostname=pod["spec"].get("hostname") or pod["metadata"]["name"],
        mounts=mounts,
        uid=uid,
        gid=gid,
        groups=groups,
        no_new_privs=context.get("allowPrivilegeEscalation") is False,
        drop_capabilities=tuple(
            c.lower().removeprefix("cap_") for c in context.get("capabilities", {}).get("drop", [])
        ),
        read_only_root=bool(context.get("readOnlyRootFilesystem")),
    )


def env_references(container: JSON) -> set[tuple[str, str]]:
    """The Secrets and ConfigMaps (kind, name) the container's env and envFrom read."""
    found = set()
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            found.add(("Secret", source["secretRef"]["name"]))
        if "configMapRef" in source:
            found.add(("ConfigMap", source["configMapRef"]["name"]))
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "secretKeyRef" in source:
            found.add(("Secret", source["secretKeyRef"]["name"]))
        if "configMapKeyRef" in source:
            found.add(("ConfigMap", source["configMapKeyRef"]["name"]))
    return found
