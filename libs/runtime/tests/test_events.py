"""The one Event path every service posts with (EventRecorder), checked against the real API server."""

from __future__ import annotations

import pytest
from kubernetes import client

from tollgate.runtime.events import EventRecorder
from tollgate.runtime.kube import object_reference


async def test_an_event_about_an_object_is_stored_as_kubectl_describe_shows_it(
    kube: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube)
    config_map = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="subject"))
    )
    subject = kube.sanitize_for_serialization(config_map)
    subject |= {"apiVersion": "v1", "kind": "ConfigMap"}
    events = EventRecorder(kube, "tollgate-test")
    assert await events.post(object_reference(subject), "Warning", "Probed", "x" * 2000, host="node-a")

    (event,) = core.list_namespaced_event(namespace, field_selector="involvedObject.name=subject").items
    assert (event.type, event.reason, event.source.component, event.count) == ("Warning", "Probed", "tollgate-test", 1)
    assert event.source.host == "node-a"
    assert event.message == "x" * 1024, "cut to the API server's limit"
    reference = event.involved_object
    assert (reference.kind, reference.name, reference.namespace, reference.uid) == (
        "ConfigMap",
        "subject",
        namespace,
        config_map.metadata.uid,
    )
    assert event.metadata.name.startswith("subject.")


async def test_an_event_the_api_server_refuses_is_logged_and_reported_lost(
    kube: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    about = {"apiVersion": "v1", "kind": "ConfigMap", "name": "subject", "namespace": "no-such-namespace"}
    assert not await EventRecorder(kube, "tollgate-test").post(about, "Normal", "Probed", "lost")
    assert "cannot post Event Probed on no-such-namespace/subject" in caplog.text
