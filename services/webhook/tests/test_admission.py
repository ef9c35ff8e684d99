"""AdmissionReview v1 in and out: parsing, the response shapes, and what is never refused."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from tollgate.models import EPIC, Goop, LoadBalancer, VirtualService
from tollgate.webhook.admission import MAX_DEPTH, BadReview, mutate, parse_review, review, without_cache
from tollgate.webhook.kinds import kind_of
from tollgate.webhook.validation import Limits

Obj = dict[str, Any]
Sample = Callable[[str], Obj]
MakeReview = Callable[..., Obj]
GOOP = kind_of(Goop)


def body(document: Any) -> bytes:
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "the body is not JSON"),
        (b"\xff\xfe", "the body is not JSON"),
        (b"[1, 2]", "the body is a JSON list, not an AdmissionReview object"),
        (body({"kind": "AdmissionReview"}), "apiVersion: Field required"),
        (body({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}), "apiVersion"),
        (body({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request: Field required"),
        (
            body({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}),
            "request.kind: Field required",
        ),
    ],
)
def test_a_body_that_is_not_an_admission_review_is_refused_with_the_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(BadReview, match=reason.replace("[", r"\[")):
        parse_review(raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, "the body is a JSON list, not an AdmissionReview object"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"the body nests deeper than {MAX_DEPTH} levels"),
        (b'{"a": "' + b"[" * 500 + b'", "b": [1]}', "apiVersion: Field required"),  # brackets in a string nest nothing
        (b"[" + b"[1], " * 200 + b"[1]]", "the body is a JSON list, not an AdmissionReview object"),
    ],
    ids=["at-the-limit", "past-the-limit", "brackets-in-a-string", "many-brackets-little-nesting"],
)
def test_nesting_is_refused_past_the_limit_only(raw: bytes, reason: str) -> None:
    with pytest.raises(BadReview, match=reason.replace("[", r"\[")):
        parse_review(raw)


def test_a_review_parses(make_review: MakeReview, sample: Sample) -> None:
    request = parse_review(body(make_review(sample("Goop"))))
    assert (request.uid, request.operation, request.kind.kind, request.namespace) == (
        "0b1c",
        "CREATE",
        "Goop",
        "default",
    )


def test_defaulting_answers_with_a_base64_json_patch(make_review: MakeReview, sample: Sample) -> None:
    goop = sample("Goop")
    del goop["spec"]["jobCount"]
    answer = mutate(GOOP, parse_review(body(make_review(goop)))).response("0b1c")
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == ("0b1c", True, "JSONPatch")
    assert {"op": "add", "path": "/spec/jobCount", "value": 1} in json.loads(base64.b64decode(response["patch"]))


def test_a_complete_object_gets_no_patch(make_review: MakeReview, sample: Sample) -> None:
    goop = sample("Goop")
    goop["spec"] = Goop.model_validate(goop).to_wire()["spec"]
    assert mutate(GOOP, parse_review(body(make_review(goop)))).response("u")["response"] == {
        "uid": "u",
        "allowed": True,
    }


def test_a_denial_names_every_field_and_rule(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    goop = sample("Goop")
    goop["spec"].update({"cmd": " ", "includeNewNodes": True})
    decision = review(GOOP, parse_review(body(make_review(goop))), store_with(), Limits())
    status = decision.response("u")["response"]["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid" and status["status"] == "Failure"
    assert status["message"] == "spec.includeNewNodes: applies to placement PerNode only; spec.cmd: must not be blank"
    assert (status["details"]["kind"], status["details"]["group"]) == ("Goop", "goop.example.com")
    assert status["details"]["causes"] == [
        {"type": "FieldValueInvalid", "field": "spec.includeNewNodes", "message": "applies to placement PerNode only"},
        {"type": "FieldValueInvalid", "field": "spec.cmd", "message": "must not be blank"},
    ]


def test_a_request_for_another_kind_is_refused_clearly(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    request = parse_review(body(make_review(sample("LoadBalancer"))))
    for decision in (mutate(GOOP, request), review(GOOP, request, store_with(), Limits())):
        response = decision.response("u")["response"]
        assert response["allowed"] is False
        assert response["status"]["code"] == 400
        assert response["status"]["message"].startswith(
            "this path admits goop.example.com/v1alpha1 Goop only; the request is for epic.acnodal.io/v1 LoadBalancer"
        )


def test_the_name_comes_from_the_request_when_the_object_has_none(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    epic = sample("EPIC")
    request = make_review(epic)
    del epic["metadata"]["name"]
    request["request"]["name"] = "other"
    decision = review(kind_of(EPIC), parse_review(body(request)), store_with(), Limits())
    assert [str(v) for v in decision.violations] == ["metadata.name: only epic/epic may exist, not epic/other"]


def test_metadata_only_updates_and_deletions_are_never_refused(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    """An operator must always be able to remove its finalizer, even from an object that breaks a rule."""
    lb = sample("LoadBalancer")  # its service group is not in the (empty) cache
    finalized = json.loads(json.dumps(lb))
    finalized["metadata"]["finalizers"] = ["tollgate.io/finalizer"]
    kind = kind_of(LoadBalancer)
    assert review(kind, parse_review(body(make_review(finalized, "UPDATE", lb))), store_with(), Limits()).allowed
    changed = json.loads(json.dumps(finalized))
    changed["spec"]["public-address"] = "192.168.77.9"
    assert not review(kind, parse_review(body(make_review(changed, "UPDATE", lb))), store_with(), Limits()).allowed
    changed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert review(kind, parse_review(body(make_review(changed, "UPDATE", lb))), store_with(), Limits()).allowed
    assert review(kind, parse_review(body(make_review(None, "DELETE", lb))), store_with(), Limits()).allowed


def test_a_denial_that_only_names_unseen_objects_is_pending(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    kind = kind_of(LoadBalancer)
    missing_group = review(kind, parse_review(body(make_review(sample("LoadBalancer")))), store_with(), Limits())
    assert missing_group.pending
    broken = sample("LoadBalancer")
    broken["spec"]["public-address"] = "0.0.0.0"
    assert not review(kind, parse_review(body(make_review(broken))), store_with(), Limits()).pending


def test_a_create_without_an_object_is_refused(make_review: MakeReview, store_with: Callable[..., Any]) -> None:
    request = make_review(None)
    request["request"]["kind"] = {"group": "goop.example.com", "version": "v1alpha1", "kind": "Goop"}
    decision = review(GOOP, parse_review(body(request)), store_with(), Limits())
    assert decision.response("u")["response"]["status"]["message"] == "request.object is missing from a CREATE request"


def test_defaulting_refuses_what_the_model_refuses_naming_the_field(make_review: MakeReview, sample: Sample) -> None:
    """The schema would answer a oneOf failure without a field name: the mutating webhook answers first."""
    vs = sample("VirtualService")
    vs["spec"]["listeners"][0]["tcp"] = vs["spec"]["listeners"][0]["udp"]
    decision = mutate(kind_of(VirtualService), parse_review(body(make_review(vs))))
    assert not decision.allowed
    assert [str(v) for v in decision.violations] == [
        "spec.listeners[0]: exactly one of udp, tcp must be set (got udp, tcp)"
    ]


def test_defaulting_never_refuses_a_metadata_only_update(make_review: MakeReview, sample: Sample) -> None:
    stored = sample("Goop")
    stored["spec"]["cmd"] = ""
    finalized = json.loads(json.dumps(stored))
    finalized["metadata"]["finalizers"] = ["tollgate.io/finalizer"]
    assert mutate(GOOP, parse_review(body(make_review(finalized, "UPDATE", stored)))).allowed


def test_a_metadata_only_update_gets_no_defaults(make_review: MakeReview, sample: Sample) -> None:
    """An object stored before the webhook (or a default) existed: removing its finalizer must not change its spec,
    or validation would hold the removal up like a spec change (waiting for the cache, refusing it)."""
    stored = {"apiVersion": "goop.example.com/v1alpha1", "kind": "Goop", "metadata": {"name": "g"}}
    stored["spec"] = {"cmd": "echo hi"}
    finalized = json.loads(json.dumps(stored))
    finalized["metadata"]["finalizers"] = []
    decision = mutate(GOOP, parse_review(body(make_review(finalized, "UPDATE", stored))))
    assert (decision.allowed, decision.patch) == (True, [])


# ---- the EPIC singleton is not deleted while anything uses it ----


@pytest.mark.parametrize("user", ["LoadBalancer", "GWProxy", "LBServiceGroup"])
def test_deleting_the_epic_singleton_in_use_is_refused_naming_the_user(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any], user: str
) -> None:
    used = sample(user)
    decision = review(
        kind_of(EPIC), parse_review(body(make_review(None, "DELETE", sample("EPIC")))), store_with(used), Limits()
    )
    assert not decision.allowed
    response = decision.response("u")["response"]["status"]
    assert (response["code"], response["reason"]) == (409, "Conflict")
    assert response["message"] == (
        f"the EPIC singleton epic/epic is in use by {user} {used['metadata']['namespace']}/{used['metadata']['name']}: "
        "it holds their tunnel IDs; delete every LoadBalancer, GWProxy and LBServiceGroup first"
    )


def test_a_refused_epic_deletion_names_five_users_and_counts_the_rest(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    groups = []
    for index in range(7):
        group = sample("LBServiceGroup")
        group["metadata"]["name"] = f"g{index}"
        groups.append(group)
    request = parse_review(body(make_review(None, "DELETE", sample("EPIC"))))
    message = review(kind_of(EPIC), request, store_with(*groups), Limits()).response("u")["response"]["status"][
        "message"
    ]
    namespace = groups[0]["metadata"]["namespace"]
    named = ", ".join(f"LBServiceGroup {namespace}/g{index}" for index in range(5))
    assert f"in use by {named} and 2 more: " in message


def test_the_epic_singleton_goes_when_nothing_uses_it(
    make_review: MakeReview, sample: Sample, store_with: Callable[..., Any]
) -> None:
    unrelated = sample("VirtualService")
    request = parse_review(body(make_review(None, "DELETE", sample("EPIC"))))
    assert without_cache(kind_of(EPIC), request) is None  # the answer reads the cache
    assert review(kind_of(EPIC), request, store_with(unrelated), Limits()).allowed


def test_deleting_other_kinds_never_waits_for_the_cache(make_review: MakeReview, sample: Sample) -> None:
    request = parse_review(body(make_review(None, "DELETE", sample("LoadBalancer"))))
    decision = without_cache(kind_of(LoadBalancer), request)
    assert decision is not None and decision.allowed


# ---- one trace per change: the admission span's traceparent goes on the object ----

TRACE_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_create_is_annotated_with_the_admission_trace_parent(make_review: MakeReview, sample: Sample) -> None:
    lb = sample("LoadBalancer")
    lb["metadata"].pop("annotations", None)
    patch = mutate(kind_of(LoadBalancer), parse_review(body(make_review(lb))), TRACE_PARENT).patch
    assert {"op": "add", "path": "/metadata/annotations", "value": {"tollgate.io/trace-parent": TRACE_PARENT}} in patch


def test_a_spec_change_replaces_the_trace_parent_and_keeps_other_annotations(
    make_review: MakeReview, sample: Sample
) -> None:
    stored = sample("Goop")
    stored["metadata"]["annotations"] = {
        "tollgate.io/trace-parent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        "a": "b",
    }
    changed = json.loads(json.dumps(stored))
    changed["spec"]["cmd"] = "echo changed"
    patch = mutate(GOOP, parse_review(body(make_review(changed, "UPDATE", stored))), TRACE_PARENT).patch
    assert {"op": "add", "path": "/metadata/annotations/tollgate.io~1trace-parent", "value": TRACE_PARENT} in patch
    assert not [op for op in patch if op["path"] == "/metadata/annotations"]


def test_a_metadata_only_update_keeps_the_trace_of_the_last_change(make_review: MakeReview, sample: Sample) -> None:
    stored = sample("Goop")
    finalized = json.loads(json.dumps(stored))
    finalized["metadata"]["finalizers"] = ["tollgate.io/finalizer"]
    assert mutate(GOOP, parse_review(body(make_review(finalized, "UPDATE", stored))), TRACE_PARENT).patch == []


def test_a_writer_that_sets_the_trace_parent_itself_keeps_it(make_review: MakeReview, sample: Sample) -> None:
    """The allocator's spec patches carry its reconcile's span: the webhook must not replace it with its own."""
    stored = sample("Goop")
    changed = json.loads(json.dumps(stored))
    changed["spec"]["cmd"] = "echo changed"
    own = "00-" + "3" * 32 + "-" + "4" * 16 + "-01"
    changed["metadata"]["annotations"] = {"tollgate.io/trace-parent": own}
    patch = mutate(GOOP, parse_review(body(make_review(changed, "UPDATE", stored))), TRACE_PARENT).patch
    assert not [op for op in patch if op["path"].startswith("/metadata/annotations")]
