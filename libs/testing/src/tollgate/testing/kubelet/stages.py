"""Which pods the embedded kubelet runs, and the KWOK stages that leave them to it.

A pod of tollgate's charts (`app.kubernetes.io/part-of=tollgate`) that is not an Envoy proxy (those are the
supervisor's) is the kubelet's. KWOK still places it (host IP, pod IP, phase Running) but does not make it
Ready, and deletes it only when its grace period is over; every other pod goes through KWOK's default
stages exactly as before (kwok/README.md).
"""

from __future__ import annotations

from importlib.resources import files

import yaml

from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.testing.pods import JSON

PART_OF = "app.kubernetes.io/part-of"
# is_kubelet_pod, as a KWOK selector expression (jq over the pod; true or false).
SELECTED = f'.metadata.labels["{PART_OF}"] == "tollgate" and .metadata.labels["{ENVOY_PROXY_LABEL}"] == null'
KWOK_DEFAULTS = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")
# KWOK's stages that would make the kubelet's pods Ready, or delete them at once, and their replacements.
LEFT_TO_THE_KUBELET = {"pod-ready": "tollgate-pod-start", "pod-delete": "tollgate-pod-delete"}


def is_kubelet_pod(pod: JSON) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return labels.get(PART_OF) == "tollgate" and ENVOY_PROXY_LABEL not in labels


def _stage(name: str) -> JSON:
    stage: JSON = yaml.safe_load(files("tollgate.testing.kubelet").joinpath("kwok", f"{name}.yaml").read_text())
    return stage


def _select(stage: JSON, selected: bool) -> JSON:
    operator = "In" if selected else "NotIn"
    stage["spec"]["selector"]["matchExpressions"].append({"key": SELECTED, "operator": operator, "values": ["true"]})
    return stage


def kwok_stages() -> list[JSON]:
    """KWOK's default stages, the kubelet's pods taken out of pod-ready and pod-delete and given their own."""
    stages = []
    for name in KWOK_DEFAULTS:
        stage = _stage(name)
        if name in LEFT_TO_THE_KUBELET:
            stages += [_select(stage, False), _select(_stage(LEFT_TO_THE_KUBELET[name]), True)]
        else:
            stages.append(stage)
    return stages
