"""The Job provider's pure parts: a Job built from a class's template, and reading a Job's outcome."""

from __future__ import annotations

import copy

import pytest

from tollgate.routedip.providers.job import CLASS_LABEL, OPERATION_LABEL, build_job, job_outcome, operation_id
from tollgate.routedip.state import class_state

TEMPLATE = {
    "backoffLimit": 1,
    "template": {
        "metadata": {"labels": {"team": "net"}},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [{"name": "prep", "image": "busybox"}],
            "containers": [
                {
                    "name": "assign",
                    "image": "busybox",
                    "env": [{"name": "NODE_NAME", "value": "stale"}, {"name": "KEEP", "value": "1"}],
                }
            ],
        },
    },
}
CLASS = class_state(
    {
        "metadata": {"name": "jobs", "uid": "class-uid", "generation": 1},
        "spec": {
            "className": "jobs",
            "provider": "job",
            "updateRoutedIP": TEMPLATE,
            "fromSecretsRef": [{"name": "creds", "namespace": "tollgate-system"}],
        },
    }
)


def test_a_job_carries_the_parameters_the_secrets_and_its_owner() -> None:
    job = build_job(
        TEMPLATE,
        routed_ip_class=CLASS,
        namespace="tollgate-system",
        action="assign",
        operation="abc123",
        env={"ROUTED_IP": "203.0.113.1", "NODE_NAME": "n2"},
        service_account="tollgate-routedip-job",
    )
    assert job["metadata"]["namespace"] == "tollgate-system"
    assert job["metadata"]["name"].startswith("routedip-assign-abc123-")
    assert job["metadata"]["labels"][OPERATION_LABEL] == "abc123"
    assert job["metadata"]["labels"][CLASS_LABEL] == "class-uid"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("ClusterRoutedIPClass", "jobs", "class-uid")
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "net" and pod["metadata"]["labels"][OPERATION_LABEL] == "abc123"
    for container in [*pod["spec"]["containers"], *pod["spec"]["initContainers"]]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["ROUTED_IP"] == "203.0.113.1" and env["NODE_NAME"] == "n2"
        assert container["envFrom"] == [{"secretRef": {"name": "creds"}}]
    assert {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}["KEEP"] == "1"
    assert job["spec"]["backoffLimit"] == 1
    assert TEMPLATE["template"]["spec"]["containers"][0]["env"][0]["value"] == "stale", "the template is not changed"


def test_operation_ids_are_stable_and_distinct() -> None:
    assert operation_id("uid", "assign", {"a": "1"}) == operation_id("uid", "assign", {"a": "1"})
    assert operation_id("uid", "assign", {"a": "1"}) != operation_id("uid", "assign", {"a": "2"})


def test_job_outcomes() -> None:
    assert job_outcome({"status": {}}) == ("running", "")
    assert job_outcome({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == ("succeeded", "")
    failed = {
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                }
            ]
        }
    }
    assert job_outcome(failed) == ("failed", "DeadlineExceeded: Job was active longer than specified deadline")


@pytest.mark.parametrize("named", [None, "tollgate-routedip-job"])
def test_a_jobs_pods_run_as_the_job_service_account_without_a_token(named: str | None) -> None:
    """Also when the template names none: the namespace's default ServiceAccount is not the job's."""
    template = copy.deepcopy(TEMPLATE)
    if named is not None:
        template["template"]["spec"]["serviceAccountName"] = named
    job = build_job(
        template,
        routed_ip_class=CLASS,
        namespace="tollgate-system",
        action="assign",
        operation="abc123",
        env={},
        service_account="tollgate-routedip-job",
    )
    pod = job["spec"]["template"]["spec"]
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("tollgate-routedip-job", False)
