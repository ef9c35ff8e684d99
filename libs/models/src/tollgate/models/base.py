"""Building blocks shared by every kind: the wire-name model base, conditions, and the CR envelope."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

JSONObject = dict[str, Any]


class WireModel(BaseModel):
    """A model whose fields travel under their seed (wire) names, given as aliases.

    Unknown fields are refused rather than silently dropped, so a typo in a manifest is an error that
    names the field instead of a setting that quietly does nothing.
    """

    model_config = ConfigDict(populate_by_name=True, extra="forbid", validate_assignment=True)

    def to_wire(self) -> JSONObject:
        """The object as the API server stores it: wire names, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def exactly_one(model: WireModel, *fields: str) -> None:
    """Refuse a model where not exactly one of `fields` is set (a oneOf of optional blocks)."""
    present = [name for name in fields if getattr(model, name) is not None]
    if len(present) != 1:
        raise ValueError(f"exactly one of {', '.join(fields)} must be set (got {', '.join(present) or 'none'})")


OPAQUE_MARK = "x-tollgate-opaque"


def opaque(description: str, alias: str | None = None) -> Any:
    """A field whose content Kubernetes defines (a Job spec, a toleration): stored as is, unpruned."""
    return Field(default=None, alias=alias, description=description, json_schema_extra={OPAQUE_MARK: True})


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(WireModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    type: str = Field(description="Type of condition in CamelCase.", min_length=1, max_length=316)
    status: ConditionStatus
    reason: str = Field(default="", description="One-word CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details of the last transition.")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration", ge=0)


def now_rfc3339() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def raw_condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    """A condition of an object as the API server returns it; empty when it has none of that type."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((item for item in conditions if item.get("type") == type_), {})


def condition_status(obj: Mapping[str, Any], type_: str) -> str:
    """The status ("True", "False" or "Unknown") of a condition of an object as the API server returns it."""
    return str(raw_condition(obj, type_).get("status", "Unknown"))


def merge_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns the object `before` into `after`: top-level keys `after`
    lacks are set to null, the others replaced whole."""
    return {key: None for key in before if key not in after} | after


def parse_rfc3339(text: str | None) -> datetime | None:
    """A Kubernetes timestamp (`2026-11-21T22:41:12Z`) as an aware datetime in UTC; None for none."""
    return datetime.fromisoformat(text).astimezone(UTC) if text else None


class Status(WireModel):
    """Every status carries the generation it reflects and its conditions."""

    observed_generation: int | None = Field(
        default=None,
        alias="observedGeneration",
        ge=0,
        description="The spec generation this status reflects.",
    )
    conditions: list[Condition] = Field(default_factory=list, description="Latest observations of state.")

    def set_condition(
        self,
        type_: str,
        status: ConditionStatus,
        reason: str,
        message: str = "",
        generation: int | None = None,
    ) -> bool:
        """Set a condition, keeping lastTransitionTime when the status did not change. True when it changed."""
        for index, existing in enumerate(self.conditions):
            if existing.type != type_:
                continue
            changed = (existing.status, existing.reason, existing.message) != (status, reason, message)
            transition = existing.last_transition_time if existing.status == status else now_rfc3339()
            self.conditions[index] = Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=transition,
                observed_generation=generation,
            )
            return changed
        self.conditions.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now_rfc3339(),
                observed_generation=generation,
            )
        )
        return True

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class PrinterColumn(BaseModel):
    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0

    def to_crd(self) -> JSONObject:
        column: JSONObject = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


class ResourceInfo(BaseModel):
    """Where a kind lives in the API: its group, version, names and how `kubectl get` shows it."""

    group: str
    version: str
    kind: str
    plural: str
    short_names: list[str]
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    categories: list[str] = Field(default_factory=lambda: ["tollgate"])
    printer_columns: list[PrinterColumn] = Field(default_factory=list)
    # JSON paths (".spec.x") a list may filter on with a field selector (`spec.x=value`), so that a client reads
    # the few objects it needs instead of the whole namespace (at most 8; string, integer or boolean fields).
    selectable_fields: list[str] = Field(default_factory=list, max_length=8)
    description: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


SpecT = TypeVar("SpecT", bound=WireModel)
StatusT = TypeVar("StatusT", bound=Status)


class CustomResource(WireModel, Generic[SpecT, StatusT]):
    """The envelope of every kind: apiVersion, kind, metadata, spec, status."""

    resource: ClassVar[ResourceInfo]

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: JSONObject = Field(default_factory=dict)
    spec: SpecT
    status: StatusT | None = None

    @model_validator(mode="after")
    def _check_type(self) -> Self:
        info = type(self).resource
        if (self.api_version, self.kind) != (info.api_version, info.kind):
            raise ValueError(
                f"apiVersion/kind: expected {info.api_version} {info.kind}, got {self.api_version} {self.kind}"
            )
        return self

    @classmethod
    def new(cls, name: str, spec: SpecT, namespace: str | None = None, **metadata: Any) -> Self:
        meta: JSONObject = {"name": name, **metadata}
        if namespace is not None:
            meta["namespace"] = namespace
        return cls(api_version=cls.resource.api_version, kind=cls.resource.kind, metadata=meta, spec=spec)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str | None:
        value = self.metadata.get("namespace")
        return str(value) if value is not None else None

    @property
    def generation(self) -> int | None:
        value = self.metadata.get("generation")
        return int(value) if value is not None else None
