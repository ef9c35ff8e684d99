"""The one Event builder every service posts with, checked against the real API server."""

from __future__ import annotations

from typing import cast

from kubernetes import client

from tollgate.runtime.kube import event_body, object_reference


def test_an_event_about_an_object_is_stored_as_kubectl_describe_shows_it(
    kube: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube)
    config_map = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="subject"))
    )
    subject = kube.sanitize_for_serialization(config_map)
    subject |= {"apiVersion": "v1", "kind": "ConfigMap"}
    body = event_body(object_reference(subject), "Warning", "Probed", "x" * 2000, "tollgate-test", namespace)
    core.create_namespaced_event(namespace, cast(client.CoreV1Event, body))  # the client takes plain dicts too

    (event,) = core.list_namespaced_event(namespace, field_selector="involvedObject.name=subject").items
    assert (event.type, event.reason, event.source.component, event.count) == ("Warning", "Probed", "tollgate-test", 1)
    assert event.message == "x" * 1024, "cut to the API server's limit"
    reference = event.involved_object
    assert (reference.kind, reference.name, reference.namespace, reference.uid) == (
        "ConfigMap",
        "subject",
        namespace,
        config_map.metadata.uid,
    )
    assert event.metadata.name.startswith("subject.")
