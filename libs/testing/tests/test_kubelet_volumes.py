"""Volumes: what their files hold, and the kubelet's atomic layout (..data swapped in one rename)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from tollgate.testing.kubelet.volumes import (
    File,
    TokenSource,
    VolumeError,
    payload,
    pod_fs_user,
    references,
    token_sources,
    write_atomic,
)

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
    "spec": {"securityContext": {"runAsUser": 10001, "fsGroup": 10001}, "containers": [{"name": "c"}]},
    "status": {"podIP": "127.1.1.9"},
}
SECRET = {"data": {"tls.crt": base64.b64encode(b"CERT").decode(), "tls.key": base64.b64encode(b"KEY").decode()}}
CONFIG_MAP = {"data": {"ca.crt": "CA"}, "binaryData": {"blob": base64.b64encode(b"\0\1").decode()}}
OBJECTS = {("Secret", "tls"): SECRET, ("ConfigMap", "kube-root-ca.crt"): CONFIG_MAP, ("Secret", "absent"): None}
# What the ServiceAccount admission plugin adds to every pod.
API_ACCESS = {
    "name": "kube-api-access-x",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ],
    },
}


def test_a_secret_volume_with_items_and_modes() -> None:
    volume = {
        "secret": {
            "secretName": "tls",
            "defaultMode": 0o440,
            "items": [{"key": "tls.key", "path": "k/key", "mode": 0o400}],
        }
    }
    assert payload(volume, POD, OBJECTS, {}) == {"k/key": File(b"KEY", 0o400)}
    assert payload({"secret": {"secretName": "tls"}}, POD, OBJECTS, {}) == {
        "tls.crt": File(b"CERT", 0o644),
        "tls.key": File(b"KEY", 0o644),
    }
    assert payload({"configMap": {"name": "kube-root-ca.crt"}}, POD, OBJECTS, {})["blob"] == File(b"\0\1", 0o644)


def test_the_service_account_volume_holds_a_token_only_the_pods_user_reads() -> None:
    sources = token_sources(API_ACCESS)
    assert sources == [TokenSource(None, 3607)]
    assert references(API_ACCESS) == {("ConfigMap", "kube-root-ca.crt")}
    files = payload(API_ACCESS, POD, OBJECTS, {sources[0]: "TOKEN"}, pod_fs_user(POD), 10001)
    assert files == {
        "token": File(b"TOKEN", 0o600, owner=10001),
        "ca.crt": File(b"CA", 0o644),
        "namespace": File(b"ns", 0o644),
    }
    assert payload(API_ACCESS, POD, OBJECTS, {sources[0]: "TOKEN"})["token"] == File(b"TOKEN", 0o644)


def test_missing_objects_and_keys() -> None:
    with pytest.raises(VolumeError, match='secret "absent" not found'):
        payload({"secret": {"secretName": "absent"}}, POD, OBJECTS, {})
    assert payload({"secret": {"secretName": "absent", "optional": True}}, POD, OBJECTS, {}) == {}
    with pytest.raises(VolumeError, match=r'configmap "kube-root-ca\.crt" has no key nope'):
        payload({"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "nope", "path": "x"}]}}, POD, OBJECTS, {})
    with pytest.raises(VolumeError, match="not supported"):
        payload({"projected": {"sources": [{"clusterTrustBundle": {}}]}}, POD, OBJECTS, {})


def test_fs_user_is_the_one_user_of_every_container() -> None:
    assert pod_fs_user(POD) == 10001
    two = {
        **POD,
        "spec": {**POD["spec"], "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 1}}]},
    }
    assert pod_fs_user(two) is None


def test_updates_swap_the_data_directory_in_one_step(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    write_atomic(volume, {"a": File(b"1", 0o644), "dir/b": File(b"2", 0o600)}, None)
    first = os.readlink(volume / "..data")
    assert (volume / "a").read_text() == "1" and (volume / "dir" / "b").read_text() == "2"
    assert os.readlink(volume / "a") == "..data/a"
    assert (volume / first / "dir" / "b").stat().st_mode & 0o777 == 0o600

    write_atomic(volume, {"a": File(b"one", 0o644)}, None)
    assert (volume / "a").read_text() == "one"
    assert not (volume / "dir").exists() and not (volume / first).exists()  # the old version and its names go
    assert sorted(p.name for p in volume.iterdir()) == sorted(["..data", "a", os.readlink(volume / "..data")])
