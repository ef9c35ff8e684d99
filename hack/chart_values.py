"""The values of every chart under deploy/charts, declared once: each chart's values.schema.json is generated from
its model here (by `make manifests`), and `make lint` checks that each chart's values.yaml holds what its model
declares.

To add a value: declare it on the chart's model (or on ServiceValues when every service chart has it), set its default
in the chart's values.yaml, and run `make manifests`.
"""

from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

DRAFT_07 = "https://json-schema.org/draft-07/schema#"

Port = Annotated[int, Field(ge=1, le=65535)]
Interval = Annotated[str, StringConstraints(pattern=r"^[0-9]+(ms|s|m|h)$")]
Cidr = Annotated[str, StringConstraints(pattern=r"^[0-9A-Fa-f.:]+/[0-9]{1,3}$")]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class Values(BaseModel):
    """A chart's values: an unknown key is an error (a misspelt value would otherwise be ignored)."""

    model_config = ConfigDict(extra="forbid")


class Image(Values):
    repository: NonEmpty
    tag: str | None = None
    pullPolicy: Literal["Always", "IfNotPresent", "Never"]


class ServiceAccount(Values):
    name: str | None = None


class ServicePort(Values):
    name: str
    port: Port
    servicePort: Port | None = None
    protocol: Literal["TCP", "UDP"] | None = None


class SecurityContext(BaseModel):
    """The container's securityContext: any field of the Kubernetes type, these two checked."""

    model_config = ConfigDict(extra="allow")

    readOnlyRootFilesystem: bool | None = None
    allowPrivilegeEscalation: bool | None = None


class Otel(Values):
    endpoint: str | None = None


class Monitor(Values):
    enabled: bool | None = None
    interval: Interval | None = None
    labels: dict[str, str] | None = None


class Metrics(Values):
    serviceMonitor: Monitor | None = None


class ServiceValues(Values):
    """What every service chart has: the library chart tollgate-common renders it."""

    replicaCount: Annotated[int, Field(ge=0)]
    image: Image
    envPrefix: Annotated[str, StringConstraints(pattern=r"^TOLLGATE_[A-Z]+_$")] | None = None
    logLevel: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = None
    serviceAccount: ServiceAccount | None = None
    ports: list[ServicePort] | None = None
    env: dict[str, str] | None = None
    extraEnv: list[Any] | None = None
    extraVolumes: list[Any] | None = None
    extraVolumeMounts: list[Any] | None = None
    podAnnotations: dict[str, Any] | None = None
    nodeSelector: dict[str, Any] | None = None
    tolerations: list[Any] | None = None
    resources: dict[str, Any]
    otel: Otel | None = None
    tollgate_common: dict[str, Any] | None = Field(default=None, alias="tollgate-common")
    global_: dict[str, Any] | None = Field(default=None, alias="global")
    securityContext: SecurityContext
    metrics: Metrics | None = None
    grpcReadinessPort: Port | None = None


class CertManager(Values):
    enabled: Literal["auto", "true", "false", True, False] | None = None
    duration: str | None = None
    renewBefore: str | None = None
    issuerRef: dict[str, Any] | None = None


class EndpointPolicy(Values):
    deniedRanges: list[Cidr]
    allowedRanges: list[Cidr]


class RoutedipTrust(Values):
    apiURLs: Annotated[set[Annotated[str, StringConstraints(pattern=r"^https?://[^/]+$")]], Field(min_length=1)]
    httpHosts: set[NonEmpty] | None = None
    jobServiceAccount: Annotated[str, StringConstraints(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$", max_length=253)]


class Xds(Values):
    address: Annotated[str, StringConstraints(pattern=r"^[^:\s]+:[0-9]+$")]


class AllocatorMetrics(Metrics):
    envoyPodMonitor: Monitor | None = None


class AllocatorValues(ServiceValues):
    certManager: CertManager | None = None
    xds: Xds | None = None
    endpointPolicy: EndpointPolicy | None = None
    metrics: AllocatorMetrics | None = None


class WebhookValues(ServiceValues):
    routedipTrust: RoutedipTrust | None = None
    affinity: dict[str, Any] | None = None
    certManager: CertManager | None = None
    endpointPolicy: EndpointPolicy | None = None


class DebugApi(Values):
    port: Port | None = None
    service: bool | None = None


class XdsValues(ServiceValues):
    debugApi: DebugApi | None = None
    endpointPolicy: EndpointPolicy | None = None


class RoutedipValues(ServiceValues):
    routedipTrust: RoutedipTrust | None = None
    tokenSecrets: set[NonEmpty] | None = None


class JobsValues(ServiceValues):
    pass


class CrdsValues(Values):
    keep: bool | None = None


CHARTS: dict[str, type[Values]] = {
    "tollgate-allocator": AllocatorValues,
    "tollgate-webhook": WebhookValues,
    "tollgate-xds": XdsValues,
    "tollgate-routedip": RoutedipValues,
    "tollgate-jobs": JobsValues,
    "tollgate-crds": CrdsValues,
}


class HelmSchema(GenerateJsonSchema):
    """A schema of what a values file may hold: an optional key may be left out but not set to null (Helm validates
    the merged values, where null deletes a default), and the defaults live in values.yaml, not in the schema."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


def json_schema(model: type[Values]) -> dict[str, Any]:
    """The model's draft-07 schema, every $ref inlined and without titles."""
    generated = model.model_json_schema(schema_generator=HelmSchema)
    definitions = generated.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(definitions[node["$ref"].removeprefix("#/$defs/")])
        return {
            key: {name: inline(sub) for name, sub in value.items()} if key == "properties" else inline(value)
            for key, value in node.items()
            if key != "title"
        }

    return {"$schema": DRAFT_07, **inline(generated)}


def schema_text(model: type[Values]) -> str:
    import json

    return json.dumps(json_schema(model), indent=2) + "\n"


def values_errors(chart: str, values: Any) -> list[str]:
    """Why `values` (a chart's values.yaml) does not match the chart's model, one line per fault naming the key."""
    model = CHARTS[chart]
    try:
        model.model_validate(values)
    except ValidationError as error:
        return [
            f"deploy/charts/{chart}/values.yaml: {'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
            + ("; declare it in hack/chart_values.py" if e["type"] == "extra_forbidden" else "")
            for e in error.errors()
        ]
    return [
        f"deploy/charts/{chart}/values.yaml: {'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
        for e in jsonschema.Draft7Validator(json_schema(model)).iter_errors(values)
    ]


def check_charts(charts: Path) -> list[str]:
    """Every fault of every chart's values.yaml, and a chart without a model."""
    errors = [
        f"{path.relative_to(charts.parents[1])}: no model in hack/chart_values.py"
        for path in sorted(charts.glob("tollgate-*/values.yaml"))
        if path.parent.name not in CHARTS
    ]
    for chart in CHARTS:
        errors += values_errors(chart, yaml.safe_load((charts / chart / "values.yaml").read_text()))
    return errors
