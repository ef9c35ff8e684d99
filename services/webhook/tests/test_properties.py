"""Property tests: random objects and random JSON never crash the webhook nor get a 500 from it.

Objects are the samples of every kind mutated at random (values replaced by arbitrary JSON, keys deleted or
added), so the rules see nearly valid input as well as garbage; the cache holds random objects too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
import jsonpointer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tollgate.models import VirtualService, kind_for
from tollgate.webhook.admission import BadReview, mutate, parse_review, review
from tollgate.webhook.cache import Store, store_for
from tollgate.webhook.defaulting import JSONPatch
from tollgate.webhook.kinds import KINDS, Kind, Model, kind_of
from tollgate.webhook.validation import INDEXES, Limits

Obj = dict[str, Any]
Sample = Callable[[str], Obj]
Defaults = Callable[[Model, Obj], JSONPatch]

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["TCP", "UDP", "0.0.0.0", "10.0.0.1", "30000-32767", "PerNode", "epic", "", " "])
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
NAMES = st.sampled_from(["epic", "sample", "a" * 59, "with.dot", "x"])
CACHED_KINDS = [model.resource.kind for model in INDEXES]
VIRTUAL_SERVICE = kind_of(VirtualService)


@st.composite
def mutated(draw: st.DrawFn, obj: Obj) -> Obj:
    """`obj` with one to four random edits somewhere inside its spec or metadata."""
    obj = copy.deepcopy(obj)
    for _ in range(draw(st.integers(1, 4))):
        container: Any = obj
        key: Any = draw(st.sampled_from(["spec", "spec", "spec", "metadata"]))
        if key not in obj:
            continue
        while isinstance(container[key], dict | list) and container[key] and draw(st.booleans()):
            container = container[key]
            key = (
                draw(st.sampled_from(sorted(container)))
                if isinstance(container, dict)
                else draw(st.integers(0, len(container) - 1))
            )
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            container[key] = draw(JSON)
        elif action == "delete" and isinstance(container, dict) and key not in ("metadata",):
            del container[key]
        elif isinstance(container[key], dict):
            container[key][draw(st.text(max_size=10))] = draw(JSON)
    if isinstance(obj.get("metadata"), dict):
        obj["metadata"]["name"] = draw(NAMES)
    return obj


def admission(obj: Any, kind: Kind, operation: str = "CREATE", old: Any = None) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": kind.group, "version": kind.version, "kind": kind.name},
                "operation": operation,
                "namespace": "ns",
                "object": obj,
                "oldObject": old,
            },
        }
    ).encode()


def filled(objects: list[Obj]) -> Store:
    store = store_for(INDEXES)
    for kind in store.kinds:
        store.replace(kind, [obj for obj in objects if obj.get("kind") == kind])
    return store


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(KINDS), operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_random_objects_are_defaulted_and_judged_without_a_crash(
    sample: Sample, data: st.DataObject, kind: Kind, operation: str, defaults: Defaults
) -> None:
    obj = data.draw(mutated(sample(kind.name)), "object")
    cached = data.draw(st.lists(st.sampled_from(CACHED_KINDS).flatmap(lambda k: mutated(sample(k))), max_size=3))
    old = data.draw(mutated(sample(kind.name)), "old") if operation == "UPDATE" else None
    request = parse_review(admission(obj, kind, operation, old))
    defaulting = mutate(kind, request)
    json.dumps(defaulting.response("u"))
    if not defaulting.allowed:  # the model refuses it: validation refuses it too, for the same fields at least
        assert defaulting.violations
        refusal = review(kind, request, filled(cached), Limits())
        assert {v.field for v in defaulting.violations} <= {v.field for v in refusal.violations}
        return
    for operation_ in defaulting.patch:  # only additions: nothing the user wrote is replaced
        assert operation_["op"] == "add"
        try:
            jsonpointer.resolve_pointer(obj, operation_["path"])
        except jsonpointer.JsonPointerException:
            continue
        raise AssertionError(f"{operation_['path']} exists and would be replaced")
    patched = jsonpatch.apply_patch(obj, defaulting.patch)
    metadata_only = operation == "UPDATE" and old is not None and old.get("spec") == obj.get("spec")
    if metadata_only:  # no defaults: they would make a finalizer removal a spec change
        assert defaulting.patch == []
    else:
        assert defaults(kind.model, patched) == []
    decision = review(kind, parse_review(admission(patched, kind, operation, old)), filled(cached), Limits())
    answer = json.loads(json.dumps(decision.response("u")))
    if answer["response"]["allowed"]:
        if not metadata_only:  # a metadata-only update is never refused, whatever the stored spec holds
            metadata = patched["metadata"] if isinstance(patched.get("metadata"), dict) else {}  # as reviewed
            kind_for(patched["apiVersion"], patched["kind"]).model_validate({**patched, "metadata": metadata})
    else:
        assert answer["response"]["status"]["code"] in (400, 422)
        assert answer["response"]["status"]["message"]


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), spec=JSON, metadata=JSON)
def test_random_json_in_an_object_is_judged_without_a_crash(kind: Kind, spec: Any, metadata: Any) -> None:
    obj = {"apiVersion": f"{kind.group}/{kind.version}", "kind": kind.name, "metadata": metadata, "spec": spec}
    for candidate in (obj, spec):
        try:
            request = parse_review(admission(candidate, kind))
        except BadReview:
            assert not isinstance(candidate, dict | None)
            continue
        json.dumps(mutate(kind, request).response("u"))
        json.dumps(review(kind, request, filled([]), Limits()).response("u"))


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200) | JSON.map(lambda value: json.dumps(value).encode()))
def test_random_bodies_are_parsed_or_refused_with_a_reason(body: bytes) -> None:
    try:
        parse_review(body)
    except BadReview as error:
        message = str(error)
        assert message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    kind=st.sampled_from(KINDS),
    operation=st.sampled_from(["mutate", "validate"]),
    shape=st.sampled_from(["bytes", "json", "review"]),
)
def test_the_server_never_answers_500(
    server: Any, sample: Sample, data: st.DataObject, kind: Kind, operation: str, shape: str
) -> None:
    if shape == "bytes":
        body = data.draw(st.binary(max_size=300))
    elif shape == "json":
        body = json.dumps(data.draw(JSON)).encode()
    else:
        body = admission(data.draw(mutated(sample(kind.name)) | JSON), kind)
    status, answer = server.post(kind.path(operation), body)  # type: ignore[arg-type]
    assert status in (200, 400), answer
    if status == 200:
        assert answer["response"].get("status", {}).get("code") != 500, answer
    else:
        assert answer["message"]


SELECTORS = st.dictionaries(st.sampled_from(["app", "zone", "tier"]), st.sampled_from(["1", "2"]), max_size=3)


def _vs(name: str, port: int, selector: dict[str, str], namespace: str = "ns") -> Obj:
    cluster = {"name": f"{name}-c", "endpoints": [{"name": f"{name}-e", "host": {"address": "a"}, "port": 1}]}
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "listeners": [{"name": f"{name}-l", "udp": {"port": port, "cluster": cluster}}]},
    }


@settings(max_examples=300, deadline=None)
@given(
    existing=st.lists(
        st.tuples(st.sampled_from(["ns", "other"]), st.sampled_from([1000, 1001]), SELECTORS), max_size=8
    ),
    selector=SELECTORS,
)
def test_the_port_index_finds_exactly_the_overlapping_selectors_of_the_namespace(
    existing: list[tuple[str, int, dict[str, str]]], selector: dict[str, str]
) -> None:
    objects = [_vs(f"vs{index}", port, labels, namespace) for index, (namespace, port, labels) in enumerate(existing)]
    expected = sorted(
        f"ns/vs{index}"
        for index, (namespace, port, labels) in enumerate(existing)
        if namespace == "ns"
        and port == 1000
        and all(labels[key] == selector[key] for key in labels.keys() & selector.keys())
    )
    new = _vs("new", 1000, selector)
    violations = review(VIRTUAL_SERVICE, parse_review(admission(new, VIRTUAL_SERVICE)), filled(objects), Limits())
    assert not [v for v in violations.violations if "other" in v.rule], "a refusal names another namespace"
    found = sorted(
        v.rule.split("VirtualService ")[1].split(",")[0]
        for v in violations.violations
        if "is taken by listener" in v.rule
    )
    assert found == expected[:3]
