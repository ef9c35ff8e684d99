"""Pod spec -> launch plan: command and args, identity, mounts, env, the podnet shim."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tollgate.testing.kubelet.container import Mount
from tollgate.testing.kubelet.image import ImageConfig
from tollgate.testing.kubelet.spec import (
    POD_IP_VARIABLE,
    ContainerConfigError,
    command_line,
    env_references,
    identity,
    launch_plan,
    service_env,
    unsupported,
)

IMAGE = ImageConfig(
    entrypoint=("python", "-m", "tollgate.jobs"),
    cmd=("--default",),
    env=(("PATH", "/venv/bin:/usr/bin"), ("PYTHONUNBUFFERED", "1")),
    user=10001,
    group=10001,
)
CONTAINER: dict[str, Any] = {
    "name": "tollgate-jobs",
    "image": "ghcr.io/tollgate/jobs:0.1.0",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    },
    "volumeMounts": [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "certs", "mountPath": "/etc/tollgate/webhook", "readOnly": True},
        {"name": "certs", "mountPath": "/etc/ca.crt", "subPath": "ca.crt"},
    ],
}
POD: dict[str, Any] = {
    "metadata": {"name": "jobs-abc", "namespace": "tollgate-system", "uid": "u1"},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 2000},
        "containers": [CONTAINER],
    },
    "status": {"podIP": "127.1.1.7"},
}
VOLUMES = {"tmp": Path("/state/pods/u1/volumes/tmp"), "certs": Path("/state/pods/u1/volumes/certs")}


def test_command_and_args_override_the_image_as_kubernetes_defines() -> None:
    env = {"LEVEL": "debug"}
    assert command_line(IMAGE, {}, env) == ("python", "-m", "tollgate.jobs", "--default")
    assert command_line(IMAGE, {"args": ["--level", "$(LEVEL)"]}, env) == (
        "python",
        "-m",
        "tollgate.jobs",
        "--level",
        "debug",
    )
    assert command_line(IMAGE, {"command": ["sleep"]}, env) == ("sleep",)  # the image's CMD goes too
    assert command_line(IMAGE, {"command": ["sh"], "args": ["-c", "$$HOME"]}, env) == ("sh", "-c", "$HOME")
    with pytest.raises(ContainerConfigError, match="no command specified"):
        command_line(ImageConfig(), {}, env)


def test_identity_from_the_container_then_the_pod_then_the_image() -> None:
    assert identity(POD, CONTAINER, IMAGE) == (10001, 10001, (2000,))
    container = {**CONTAINER, "securityContext": {"runAsUser": 7}}
    assert identity({**POD, "spec": {"supplementalGroups": [5]}}, container, ImageConfig()) == (7, 0, ())
    root = {**POD, "spec": {"securityContext": {"runAsNonRoot": True}}}
    with pytest.raises(ContainerConfigError, match="runAsNonRoot and image will run as root"):
        identity(root, {}, ImageConfig())


def test_the_plan_of_a_chart_container() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "TOLLGATE_JOBS_HEALTH_PORT": "8080"}
    plan = launch_plan(POD, CONTAINER, IMAGE, env, VOLUMES, Path("/state/hosts"), Path("/tools/libpodnet.so"))
    assert plan.argv == ("python", "-m", "tollgate.jobs", "--default")
    assert plan.env == {
        "PATH": "/venv/bin:/usr/bin",
        "PYTHONUNBUFFERED": "1",
        "HOSTNAME": "jobs-abc",
        "HOME": "/",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "TOLLGATE_JOBS_HEALTH_PORT": "8080",
        "LD_PRELOAD": "/tools/libpodnet.so",
        POD_IP_VARIABLE: "127.1.1.7",
    }
    assert plan.mounts == (
        Mount("/state/pods/u1/volumes/tmp", "/tmp"),
        Mount("/state/pods/u1/volumes/certs", "/etc/tollgate/webhook", read_only=True),
        Mount("/state/pods/u1/volumes/certs/ca.crt", "/etc/ca.crt"),
        Mount("/state/hosts", "/etc/hosts", read_only=True),
    )
    assert (plan.uid, plan.gid, plan.groups, plan.hostname, plan.cwd) == (10001, 10001, (2000,), "jobs-abc", "/")
    assert (plan.no_new_privs, plan.drop_capabilities, plan.read_only_root) == (True, ("all",), True)


def test_a_mount_of_no_volume_is_a_config_error() -> None:
    container = copy.deepcopy(CONTAINER)
    container["volumeMounts"].append({"name": "nope", "mountPath": "/x"})
    with pytest.raises(ContainerConfigError, match='volumeMount "nope" names no volume'):
        launch_plan(POD, container, IMAGE, {}, VOLUMES, Path("/h"), Path("/p"))


def test_what_the_kubelet_does_not_run_is_named() -> None:
    assert unsupported(POD) is None
    exec_probe = {**POD, "spec": {"containers": [{**CONTAINER, "livenessProbe": {"exec": {"command": ["true"]}}}]}}
    assert unsupported(exec_probe) == "container tollgate-jobs: exec probes are not supported by the embedded kubelet"
    assert unsupported({**POD, "spec": {**POD["spec"], "initContainers": [CONTAINER]}}) is not None


def test_service_env_and_env_references() -> None:
    assert service_env("https://127.0.0.1:32764") == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "32764",
        "KUBERNETES_SERVICE_PORT_HTTPS": "32764",
    }
    container = {
        "envFrom": [{"secretRef": {"name": "s1"}}, {"configMapRef": {"name": "c1"}}],
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c2", "key": "k"}}},
            {"name": "B", "value": "b"},
        ],
    }
    assert env_references(container) == {("Secret", "s1"), ("ConfigMap", "c1"), ("ConfigMap", "c2")}
