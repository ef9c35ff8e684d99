"""Class validation (pure) and the slim states parsed from API objects."""

from __future__ import annotations

from typing import Any

import pytest

from tollgate.models.routedip import Trust
from tollgate.routedip.state import class_state, node_state, pod_state, routed_ip_state, service_state, slice_state
from tollgate.routedip.validation import DEFAULT_TRUST, class_problems

JOB = {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}


def routed_ip_class(name: str = "c", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": "u-1", "generation": 3}, "spec": {"className": "c", **spec}}


def problems(body: dict[str, Any], same: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return class_problems(class_state(body), "tollgate-system", same)


def test_a_local_class_is_accepted() -> None:
    assert problems(routed_ip_class(provider="local")) == []


def test_digitalocean_allows_one_reserved_ip_per_droplet() -> None:
    found = problems(
        routed_ip_class(
            provider="digitalocean",
            perNodeIPLimit=2,
            fromSecretsRef=[{"name": "do", "namespace": "tollgate-system"}],
        )
    )
    assert found == [
        ("PerNodeIPLimitUnsupported", "spec.perNodeIPLimit: DigitalOcean allows 1 reserved IP per droplet; got 2")
    ]


def test_digitalocean_needs_a_token_secret_in_reach() -> None:
    found = dict(problems(routed_ip_class(provider="digitalocean")))
    assert "spec.fromSecretsRef: the digitalocean provider needs a Secret" in found["MissingCredentials"]
    far = problems(routed_ip_class(provider="local", fromSecretsRef=[{"name": "s", "namespace": "elsewhere"}]))
    assert far[0][0] == "SecretOutOfReach"
    assert far[0][1].startswith("spec.fromSecretsRef[0].namespace: must be 'tollgate-system'")


def secret(name: str) -> dict[str, str]:
    return {"name": name, "namespace": "tollgate-system"}


def test_a_secret_outside_the_charts_token_secrets_is_not_allowed() -> None:
    state = class_state(routed_ip_class(provider="local", fromSecretsRef=[secret("do-token"), secret("db")]))
    assert class_problems(state, "tollgate-system", token_secrets=frozenset({"do-token"})) == [
        (
            "SecretNotAllowed",
            "spec.fromSecretsRef[1].name: tollgate-routedip may read only the Secrets its chart's tokenSecrets lists "
            "(do-token), not 'db'",
        )
    ]
    assert class_problems(state, "tollgate-system", token_secrets=frozenset({"do-token", "db"})) == []
    assert class_problems(state, "tollgate-system") == []  # not told: any Secret of its namespace


def test_the_job_provider_needs_a_valid_template() -> None:
    assert dict(problems(routed_ip_class(provider="job")))["MissingJobTemplate"] == (
        "spec.updateRoutedIP: required when spec.provider is job"
    )
    assert problems(routed_ip_class(provider="job", updateRoutedIP=JOB)) == []
    always = {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}]}}}
    assert problems(routed_ip_class(provider="job", updateRoutedIP=JOB, updateFirewall=always)) == [
        ("InvalidJobTemplate", "spec.updateFirewall.template.spec.restartPolicy: must be Never or OnFailure")
    ]


def test_a_class_name_must_name_one_class() -> None:
    found = problems(routed_ip_class("first", provider="local"), same=("first", "second"))
    assert found[0][0] == "DuplicateClassName"
    assert "also the className of ClusterRoutedIPClass second" in found[0][1]


def test_an_invalid_spec_names_the_field() -> None:
    state = class_state(routed_ip_class(provider="local", nodePortRange="30000-20000"))
    assert state.spec is None and state.class_name == "c"
    assert problems(routed_ip_class(provider="local", nodePortRange="30000-20000"))[0][0] == "InvalidSpec"
    assert "LOW <= HIGH" in (state.spec_error or "")


def test_node_state_reads_readiness_cordon_taints_and_provider_id() -> None:
    state = node_state(
        {
            "metadata": {
                "name": "n1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "unschedulable": True,
                "providerID": "digitalocean://1",
                "taints": [{"key": "k", "effect": "NoSchedule"}],
            },
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]},
        }
    )
    assert not state.ready and state.unschedulable
    assert state.ready_detail == "NotReady (Ready=Unknown, NodeStatusUnknown)"
    assert state.provider_id == "digitalocean://1"
    assert [(t.key, t.effect) for t in state.taints] == [("k", "NoSchedule")]


def test_service_slice_pod_and_routed_ip_states() -> None:
    service = service_state(
        {
            "metadata": {"namespace": "ns", "name": "svc"},
            "spec": {
                "type": "NodePort",
                "externalTrafficPolicy": "Local",
                "selector": {"app": "x"},
                "ports": [{"port": 80, "nodePort": 30080}],
            },
        }
    )
    assert service.local_traffic and service.ports[0].node_port == 30080 and service.selects({"app": "x", "b": "c"})
    endpoint_slice = slice_state(
        {
            "metadata": {"namespace": "ns", "name": "svc-1", "labels": {"kubernetes.io/service-name": "svc"}},
            "endpoints": [
                {"nodeName": "n1", "conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": "p"}},
                {"nodeName": "n2", "conditions": {"ready": True, "terminating": True}},
                {"nodeName": "n3", "conditions": {}},
            ],
        }
    )
    assert endpoint_slice is not None
    assert [(e.node, e.ready, e.pod) for e in endpoint_slice.endpoints] == [
        ("n1", True, "p"),
        ("n2", False, None),
        ("n3", True, None),
    ]
    assert slice_state({"metadata": {"namespace": "ns", "name": "orphan"}}) is None
    pod = pod_state(
        {
            "metadata": {"namespace": "ns", "name": "p", "labels": {"app": "x"}},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 443}]}],
            },
            "status": {"phase": "Running"},
        }
    )
    assert pod.active and not pod.ready and pod.host_ports == (("TCP", 443),)
    rip = routed_ip_state(
        {
            "metadata": {"namespace": "ns", "name": "ip", "uid": "u", "generation": 2, "resourceVersion": "7"},
            "spec": {
                "className": "c",
                "routedIP": "203.0.113.1",
                "serviceRef": {"serviceName": "svc", "namespace": "ns"},
            },
            "status": {"assignedNode": "n1", "targetNode": "n2", "lastMoveTime": "2026-01-01T00:00:00Z"},
        }
    )
    assert rip.placement.nodes() == {"n1", "n2"} and rip.service == ("ns", "svc")


DO_SECRET = [{"name": "do", "namespace": "tollgate-system"}]


def test_a_digitalocean_api_url_must_be_https_and_on_the_allow_list() -> None:
    def refused(url: str, trust: Trust = DEFAULT_TRUST) -> list[tuple[str, str]]:
        body = routed_ip_class(provider="digitalocean", fromSecretsRef=DO_SECRET, digitalocean={"apiURL": url})
        return class_problems(class_state(body), "tollgate-system", (), trust)

    assert refused("https://api.digitalocean.com") == []
    assert refused("https://api.digitalocean.com/") == []
    assert refused("https://collector.example.com") == [
        (
            "APIURLNotAllowed",
            "spec.digitalocean.apiURL: 'https://collector.example.com' is not on the allow-list of API URLs "
            "(https://api.digitalocean.com)",
        )
    ]
    assert refused("http://api.digitalocean.com")[0][1] == (
        "spec.digitalocean.apiURL: 'http://api.digitalocean.com': must be https (the API token travels with every "
        "request)"
    )
    assert "credentials, query and fragment" in refused("https://me@api.digitalocean.com")[0][1]
    assert "not an absolute https:// URL" in refused("api.digitalocean.com")[0][1]
    fake = Trust(api_urls=("http://127.0.0.1:8089",), http_hosts=frozenset({"127.0.0.1:8089"}))
    assert refused("http://127.0.0.1:8089", fake) == []
    assert "must be https" in refused("http://127.0.0.1:8089", Trust(api_urls=("http://127.0.0.1:8089",)))[0][1]
    assert "allow-list" in refused("https://127.0.0.1:8089", fake)[0][1]


def job(pod: dict[str, Any], container: dict[str, Any] | None = None) -> dict[str, Any]:
    containers = [{"name": "c", "image": "busybox", **(container or {})}]
    return {"template": {"spec": {"restartPolicy": "Never", "containers": containers, **pod}}}


def test_a_job_template_gets_no_privileges() -> None:
    def refused(template: dict[str, Any]) -> list[tuple[str, str]]:
        return problems(routed_ip_class(provider="job", updateRoutedIP=JOB, updateFirewall=template))

    assert refused(job({"serviceAccountName": "tollgate-routedip-job"})) == []
    assert refused(job({}, {"securityContext": {"privileged": False, "capabilities": {"drop": ["ALL"]}}})) == []
    found = refused(
        job(
            {"serviceAccountName": "tollgate-routedip", "hostNetwork": True, "hostPID": True, "hostIPC": True},
            {"securityContext": {"privileged": True, "allowPrivilegeEscalation": True, "capabilities": {"add": ["X"]}}},
        )
    )
    assert {reason for reason, _ in found} == {"PrivilegedJobTemplate"}
    assert [message.split(":")[0] for _, message in found] == [
        "spec.updateFirewall.template.spec.serviceAccountName",
        "spec.updateFirewall.template.spec.hostNetwork",
        "spec.updateFirewall.template.spec.hostPID",
        "spec.updateFirewall.template.spec.hostIPC",
        "spec.updateFirewall.template.spec.containers[0].securityContext.privileged",
        "spec.updateFirewall.template.spec.containers[0].securityContext.allowPrivilegeEscalation",
        "spec.updateFirewall.template.spec.containers[0].securityContext.capabilities.add",
    ]
    assert found[0][1].endswith(
        "must be 'tollgate-routedip-job', the chart's ServiceAccount for Jobs (got 'tollgate-routedip')"
    )
    init = {"initContainers": [{"name": "i", "image": "x", "securityContext": {"privileged": True}}]}
    assert refused(job(init))[0][1].startswith("spec.updateFirewall.template.spec.initContainers[0].securityContext")
    assert refused(job({"serviceAccount": "default"}))[0][1].startswith(
        "spec.updateFirewall.template.spec.serviceAccount:"
    )


def test_the_allow_list_setting_is_checked_at_startup() -> None:
    fake = Trust.parse("https://api.digitalocean.com, http://127.0.0.1:8089", "127.0.0.1:8089", "jobs", "URLS")
    assert fake == Trust(
        ("https://api.digitalocean.com", "http://127.0.0.1:8089"), frozenset({"127.0.0.1:8089"}), "jobs"
    )
    with pytest.raises(ValueError, match=r"^URLS: 'http://127\.0\.0\.1:8089': must be https"):
        Trust.parse("http://127.0.0.1:8089", "", "jobs", "URLS")
