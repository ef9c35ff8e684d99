"""tollgate.runtime.kube.Watch on a real API server: each event once, as sent, resumable from where it ended."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tollgate.runtime.kube import Watch

pytestmark = pytest.mark.e2e


def config_map(name: str, value: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"test": "watch"}), data={"key": value})


def changes(watcher: Watch, core: client.CoreV1Api, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """What the watcher sees of this test's ConfigMaps (not the kube-root-ca.crt the controller-manager adds) in a
    watch the server ends after a second."""
    return list(
        watcher.events(core.list_namespaced_config_map, namespace, label_selector="test=watch", timeout_seconds=1)
    )


def test_a_watch_yields_each_change_as_the_api_server_sent_it_and_resumes_after_the_last(
    core: client.CoreV1Api, namespace: str
) -> None:
    listed = str(core.list_namespaced_config_map(namespace).metadata.resource_version)
    core.create_namespaced_config_map(namespace, config_map("a", "1"))
    core.patch_namespaced_config_map("a", namespace, {"data": {"key": "2"}})
    core.delete_namespaced_config_map("a", namespace)

    watcher = Watch(listed)
    events = changes(watcher, core, namespace)
    assert [(kind, obj["metadata"]["name"], (obj.get("data") or {}).get("key")) for kind, obj in events] == [
        ("ADDED", "a", "1"),
        ("MODIFIED", "a", "2"),
        ("DELETED", "a", "2"),
    ]
    assert events[0][1]["kind"] == "ConfigMap", "the object as JSON, not a model"
    assert int(watcher.resource_version) >= int(events[-1][1]["metadata"]["resourceVersion"])

    core.create_namespaced_config_map(namespace, config_map("b", "1"))
    resumed = changes(watcher, core, namespace)
    assert [(kind, obj["metadata"]["name"]) for kind, obj in resumed] == [("ADDED", "b")], "nothing seen twice"
