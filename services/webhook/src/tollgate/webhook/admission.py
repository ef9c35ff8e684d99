"""AdmissionReview v1 in and out: parse a request body, decide, and build the response. Pure.

A body that is not an AdmissionReview v1 is a `BadReview` (HTTP 400 with the reason), a body nested deeper
than MAX_DEPTH among them; anything that is one gets an AdmissionReview back, allowed or denied with a reason,
never an error status.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tollgate.runtime.tracing import TRACE_PARENT_ANNOTATION, annotated_parent
from tollgate.webhook.defaulting import JSONPatch, default_patch, pointer_token
from tollgate.webhook.kinds import Kind
from tollgate.webhook.validation import (
    DELETION_RULES,
    Limits,
    View,
    Violation,
    field_path,
    parse,
    validate,
    validate_deletion,
)

API_VERSION = "admission.k8s.io/v1"
# The deepest nesting of a review body taken: the object sits 3 levels down, tollgate's kinds nest about 10 more
# (managedFields mirrors that), so 100 leaves room while keeping every recursive walk far below Python's limit.
MAX_DEPTH = 100
# What orjson says of a document nested past its own limit (1024 levels), far past MAX_DEPTH.
_ORJSON_DEPTH_ERROR = "depth limit exceeded"


class BadReview(ValueError):
    """The body is not an AdmissionReview v1; the message says why."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class GroupVersionKind(_Loose):
    group: str
    version: str
    kind: str


class AdmissionRequest(_Loose):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    name: str = ""
    namespace: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(_Loose):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def parse_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview v1 body; BadReview names what is wrong."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        if str(error).startswith(_ORJSON_DEPTH_ERROR):
            raise BadReview(f"the body nests deeper than {MAX_DEPTH} levels") from None
        raise BadReview(f"the body is not JSON: {error}") from None
    # Nesting needs brackets: a body with at most MAX_DEPTH of them (most reviews) needs no walk.
    if body.count(b"{") + body.count(b"[") > MAX_DEPTH and _depth(document) > MAX_DEPTH:
        raise BadReview(f"the body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(document, dict):
        raise BadReview(f"the body is a JSON {type(document).__name__}, not an AdmissionReview object")
    try:
        return AdmissionReview.model_validate(document).request
    except ValidationError as error:
        problems = "; ".join(
            f"{field_path(detail['loc']) or 'body'}: {detail['msg']}"
            for detail in error.errors(include_url=False, include_context=False)
        )
        raise BadReview(f"not an AdmissionReview {API_VERSION}: {problems}") from None


def _depth(document: Any) -> int:
    """How deep arrays and objects nest in `document` (a scalar is 0), level by level, without recursion; stops
    counting past MAX_DEPTH."""
    depth, level = 0, [document]
    while containers := [value for value in level if isinstance(value, dict | list)]:
        depth += 1
        if depth > MAX_DEPTH:
            break
        level = [child for value in containers for child in (value.values() if isinstance(value, dict) else value)]
    return depth


@dataclass
class Decision:
    """What the webhook answers: allowed (with a patch) or denied (with the violations or a reason)."""

    allowed: bool
    patch: JSONPatch = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    message: str = ""
    code: int = 200
    reason: str = ""
    subject: dict[str, str] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        """Denied only for objects the cache may not have seen yet: worth a retry once it catches up."""
        return not self.allowed and bool(self.violations) and all(v.pending for v in self.violations)

    def response(self, uid: str) -> dict[str, Any]:
        """The AdmissionReview v1 to send back."""
        answer: dict[str, Any] = {"uid": uid, "allowed": self.allowed}
        if self.patch:
            answer["patchType"] = "JSONPatch"
            answer["patch"] = base64.b64encode(orjson.dumps(self.patch)).decode()
        if not self.allowed:
            status: dict[str, Any] = {
                "status": "Failure",
                "code": self.code,
                "reason": self.reason,
                "message": self.message or "; ".join(str(v) for v in self.violations),
            }
            if self.violations:
                status["details"] = {
                    **self.subject,
                    "causes": [
                        {"type": "FieldValueInvalid", "field": v.field, "message": v.rule} for v in self.violations
                    ],
                }
            answer["status"] = status
        return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


def refuse(message: str, code: int = 400) -> Decision:
    return Decision(allowed=False, message=message, code=code, reason="BadRequest")


def _mismatch(kind: Kind, request: AdmissionRequest) -> Decision | None:
    asked = request.kind
    if (asked.group, asked.version, asked.kind) == (kind.group, kind.version, kind.name):
        return None
    return refuse(
        f"this path admits {kind.describe()} only; the request is for {asked.group}/{asked.version} {asked.kind} "
        "(check the webhook configuration's rules and path)"
    )


def _object(request: AdmissionRequest) -> dict[str, Any] | None:
    """The object under review with the request's name and namespace filled in where its metadata lacks them."""
    if request.object is None:
        return None
    metadata = request.object.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    if request.name and not metadata.get("name"):
        metadata["name"] = request.name
    if request.namespace and not metadata.get("namespace"):
        metadata["namespace"] = request.namespace
    return {**request.object, "metadata": metadata}


def _denial(kind: Kind, obj: dict[str, Any], violations: list[Violation]) -> Decision:
    # With the kind and name in the details, kubectl words it as it words schema errors: The Goop "g" is invalid: ...
    subject = {"group": kind.group, "kind": kind.name, "name": str(obj["metadata"].get("name") or "")}
    return Decision(allowed=False, violations=violations, code=422, reason="Invalid", subject=subject)


def _being_deleted_or_unchanged(request: AdmissionRequest, obj: dict[str, Any]) -> bool:
    """Metadata-only updates (finalizers, annotations, deletion) are never refused, so operators never stick."""
    if request.operation != "UPDATE" or request.old_object is None:
        return False
    deleting = bool(obj["metadata"].get("deletionTimestamp"))
    return deleting or obj.get("spec") == request.old_object.get("spec")


def mutate(kind: Kind, request: AdmissionRequest, trace_parent: str | None = None) -> Decision:
    """Defaulting: allowed, with the patch that fills in the model's defaults and, on a create or a spec change,
    sets the `tollgate.io/trace-parent` annotation to `trace_parent` (the admission span's W3C traceparent), so
    that the operators reacting to this change continue its trace (tollgate.runtime.tracing).

    The API server checks the CRD schema after the mutating webhooks and before the validating ones, so an
    object its model refuses is denied here, with the field and the rule, rather than left to the schema's
    terser wording (a oneOf failure there names no field).
    """
    if mismatch := _mismatch(kind, request):
        return mismatch
    obj = _object(request)
    if request.operation not in ("CREATE", "UPDATE") or obj is None:
        return Decision(allowed=True)
    if _being_deleted_or_unchanged(request, obj):
        # No defaults either: they would turn a finalizer removal into a spec change (of an object stored before
        # the webhook or a default existed), which validation then holds up like any other.
        return Decision(allowed=True)
    resource, violations = parse(kind.model, obj)
    if resource is None:
        return _denial(kind, obj, violations)
    return Decision(
        allowed=True, patch=default_patch(obj, resource) + _trace_patch(obj, request.old_object, trace_parent)
    )


def _trace_patch(obj: dict[str, Any], old: dict[str, Any] | None, trace_parent: str | None) -> JSONPatch:
    """Set the trace-parent annotation, unless the writer sets one itself in this request (an operator carrying the
    trace of its reconcile)."""
    if trace_parent is None or annotated_parent(obj) not in (None, annotated_parent(old)):
        return []
    if not isinstance(obj["metadata"].get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": {TRACE_PARENT_ANNOTATION: trace_parent}}]
    path = f"/metadata/annotations/{pointer_token(TRACE_PARENT_ANNOTATION)}"
    return [{"op": "add", "path": path, "value": trace_parent}]


def without_cache(kind: Kind, request: AdmissionRequest) -> Decision | None:
    """The validation decision that needs no other object (a wrong path, a DELETE no rule guards, a metadata-only
    update, no object), or None when the rules must read the cache: answered before any wait for the cache."""
    if mismatch := _mismatch(kind, request):
        return mismatch
    obj = _object(request)
    if request.operation == "DELETE" and kind.model in DELETION_RULES:
        return None
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision(allowed=True)
    if obj is None:
        return refuse(f"request.object is missing from a {request.operation} request")
    if _being_deleted_or_unchanged(request, obj):
        return Decision(allowed=True)
    return None


def review(kind: Kind, request: AdmissionRequest, view: View, limits: Limits) -> Decision:
    """Validation: allowed, or denied with every violation (so nothing is half-applied)."""
    if (decision := without_cache(kind, request)) is not None:
        return decision
    if request.operation == "DELETE":
        return _deletion(kind, request, view)
    obj = _object(request)
    assert obj is not None  # without_cache answered a request without one
    metadata = obj["metadata"]
    violations = validate(
        kind.model,
        obj,
        request.old_object if request.operation == "UPDATE" else None,
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        view=view,
        limits=limits,
    )
    return _denial(kind, obj, violations) if violations else Decision(allowed=True)


def _deletion(kind: Kind, request: AdmissionRequest, view: View) -> Decision:
    """A DELETE of an object a rule guards: allowed, or 409 Conflict saying what still needs it."""
    violations = validate_deletion(kind.model, request.namespace, request.name, view)
    if not violations:
        return Decision(allowed=True)
    subject = {"group": kind.group, "kind": kind.name, "name": request.name}
    return Decision(allowed=False, violations=violations, code=409, reason="Conflict", subject=subject)
