"""Defaulting: the JSON patch that makes a stored object complete and explicit.

The defaults are the models' own (pydantic Field defaults, which the CRD schemas carry as `default:`):
validate the object, dump it with its defaults, and add what the object lacks. Values the user wrote are
never replaced, and an object the model refuses gets no patch (validation then rejects it, naming the field).
"""

from __future__ import annotations

from typing import Any

from tollgate.models import CustomResource

JSONPatch = list[dict[str, Any]]


def pointer_token(key: str) -> str:
    """A key escaped for a JSON pointer (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def additions(original: Any, complete: Any, pointer: str) -> JSONPatch:
    """`add` operations for what `complete` has and `original` lacks, never touching present values."""
    if isinstance(original, dict) and isinstance(complete, dict):
        patch: JSONPatch = []
        for key, value in complete.items():
            path = f"{pointer}/{pointer_token(key)}"
            if key not in original:
                patch.append({"op": "add", "path": path, "value": value})
            else:
                patch.extend(additions(original[key], value, path))
        return patch
    if isinstance(original, list) and isinstance(complete, list) and len(original) == len(complete):
        return [
            operation
            for index, (item, complete_item) in enumerate(zip(original, complete, strict=True))
            for operation in additions(item, complete_item, f"{pointer}/{index}")
        ]
    return []


def default_patch(obj: dict[str, Any], resource: CustomResource[Any, Any]) -> JSONPatch:
    """The JSON patch (RFC 6902) that adds to `obj`'s spec the defaults its parsed model `resource` holds;
    status is not ours."""
    return additions(obj.get("spec"), resource.to_wire()["spec"], "/spec")
