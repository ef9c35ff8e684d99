"""CustomResourceDefinitions generated from the models: structural OpenAPI v3 schemas.

Pydantic's JSON Schema is turned into what the API server accepts: references inlined, optional
(`X | None`) fields unwrapped, `int | str` as int-or-string, free-form maps kept unpruned, titles dropped.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tollgate.models.base import OPAQUE_MARK, CustomResource, JSONObject

_DROPPED_KEYS = {"title", "$defs"}
_K8S_FORMATS = {
    "ipv4",
    "ipv6",
    "cidr",
    "date-time",
    "date",
    "uri",
    "hostname",
    "uuid",
    "byte",
    "int32",
    "int64",
}


def _resolve(node: Any, defs: JSONObject) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**target, **extra}, defs)
    return {key: _resolve(value, defs) for key, value in node.items() if key not in _DROPPED_KEYS}


def _structural(node: Any) -> Any:
    """Rewrite one resolved JSON Schema node (and its children) into a structural CRD schema."""
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if node.pop(OPAQUE_MARK, False):
        schema: JSONObject = {"x-kubernetes-preserve-unknown-fields": True}
        inner = _without_null(node)
        schema["type"] = "array" if inner.get("type") == "array" else "object"
        if schema["type"] == "array":
            schema["items"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if "description" in node:
            schema["description"] = node["description"]
        return schema
    if "anyOf" in node:
        options = [option for option in node["anyOf"] if option.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        types = sorted(option.get("type", "") for option in options)
        if types == ["integer", "string"]:
            return {**{k: v for k, v in rest.items() if k != "default"}, "x-kubernetes-int-or-string": True}
        if len(options) == 1:
            return _structural({**options[0], **rest})
        raise ValueError(f"cannot express a union in a structural schema: {node}")
    if node.get("format") not in _K8S_FORMATS:
        node.pop("format", None)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")  # structural schemas prune unknown fields instead
    if node.get("type") == "object" and node.get("additionalProperties") is True:
        node.pop("additionalProperties")
        node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("default") is None:
        node.pop("default", None)
    for key in ("properties",):
        if key in node:
            node[key] = {name: _structural(child) for name, child in node[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _structural(node[key])
    return node


def _without_null(node: JSONObject) -> JSONObject:
    options = [option for option in node.get("anyOf", [node]) if option.get("type") != "null"]
    return options[0] if options else node


def openapi_schema(model: type[CustomResource[Any, Any]]) -> JSONObject:
    """The structural openAPIV3Schema of a kind."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    resolved = _resolve(raw, raw.get("$defs", {}))
    schema: JSONObject = _structural(resolved)
    properties = schema["properties"]
    properties["metadata"] = {"type": "object"}
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    schema["required"] = ["spec"]
    schema["description"] = model.resource.description
    return schema


def definition(model: type[CustomResource[Any, Any]]) -> JSONObject:
    info = model.resource
    version: JSONObject = {
        "name": info.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
        "subresources": {"status": {}},
        "additionalPrinterColumns": [column.to_crd() for column in info.printer_columns],
    }
    if info.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in info.selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.crd_name, "labels": {"app.kubernetes.io/part-of": "tollgate"}},
        "spec": {
            "group": info.group,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": info.short_names,
                "categories": info.categories,
            },
            "scope": info.scope,
            "versions": [version],
        },
    }


def render(model: type[CustomResource[Any, Any]]) -> str:
    header = "# Generated by `make manifests` from tollgate.models; do not edit.\n"
    return header + yaml.safe_dump(definition(model), sort_keys=False, width=120)


def file_name(model: type[CustomResource[Any, Any]]) -> str:
    info = model.resource
    return f"{info.group}_{info.plural}.yaml"
