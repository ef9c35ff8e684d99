"""The KWOK stages of the embedded cluster: KWOK's defaults, with the kubelet's pods left to the kubelet."""

from __future__ import annotations

import os
import subprocess
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from tollgate.testing.kubelet.stages import KWOK_DEFAULTS, SELECTED, is_kubelet_pod, kwok_stages
from tollgate.testing.tools import versions


def test_every_default_stage_is_given_and_the_kubelets_pods_change_hands() -> None:
    stages = {stage["metadata"]["name"]: stage for stage in kwok_stages()}
    assert set(stages) == {*KWOK_DEFAULTS, "tollgate-pod-start", "tollgate-pod-delete"}

    def selection(name: str) -> list[str]:
        expressions = stages[name]["spec"]["selector"]["matchExpressions"]
        return [e["operator"] for e in expressions if e["key"] == SELECTED]

    assert selection("pod-ready") == selection("pod-delete") == ["NotIn"]
    assert selection("tollgate-pod-start") == selection("tollgate-pod-delete") == ["In"]
    assert selection("pod-complete") == selection("node-initialize") == []  # Jobs and nodes as before
    assert 'status: "False"' in stages["tollgate-pod-start"]["spec"]["next"]["statusTemplate"]


def test_the_selection_in_python_and_in_kwoks_expression_agree() -> None:
    def pod(labels: dict[str, str] | None) -> dict[str, object]:
        return {"metadata": {"labels": labels} if labels is not None else {}}

    assert is_kubelet_pod(pod({"app.kubernetes.io/part-of": "tollgate"}))
    assert not is_kubelet_pod(pod({"app.kubernetes.io/part-of": "tollgate", "tollgate.io/envoy-proxy": "true"}))
    assert not is_kubelet_pod(pod({"app.kubernetes.io/part-of": "other"}))
    assert not is_kubelet_pod(pod(None))
    assert '"app.kubernetes.io/part-of"] == "tollgate"' in SELECTED and '"tollgate.io/envoy-proxy"] == null' in SELECTED


def test_the_copied_stages_are_kwoks_own() -> None:
    """When the Go module cache holds the pinned KWOK (make tools puts it there), the copies match it."""
    cache = (
        os.environ.get("GOMODCACHE")
        or subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    )
    source = Path(cache or "/nonexistent") / f"sigs.k8s.io/kwok@{versions()['KWOK_VERSION']}/kustomize/stage"
    if not source.is_dir():
        pytest.skip(f"no KWOK source in the Go module cache ({source})")
    copies = files("tollgate.testing.kubelet").joinpath("kwok")
    directories = {"node-initialize": "node/fast", "node-heartbeat-with-lease": "node/heartbeat-with-lease"}
    for name in KWOK_DEFAULTS:
        upstream = source / directories.get(name, "pod/fast") / f"{name}.yaml"
        assert yaml.safe_load(copies.joinpath(f"{name}.yaml").read_text()) == yaml.safe_load(upstream.read_text()), name
