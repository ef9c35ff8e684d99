"""tollgate.models: pydantic models of every tollgate kind, and their CRDs."""

from typing import Any

from tollgate.models.base import Condition, CustomResource, ResourceInfo, Status, WireModel
from tollgate.models.epic import (
    EPIC,
    Account,
    GWEndpointSlice,
    GWProxy,
    GWRoute,
    LBServiceGroup,
    LoadBalancer,
    RemoteEndpoint,
    ServicePrefix,
)
from tollgate.models.goop import Goop
from tollgate.models.routedip import ClusterRoutedIPClass, RoutedIP
from tollgate.models.servicemesh import VirtualService

ALL_KINDS: tuple[type[CustomResource[Any, Any]], ...] = (
    EPIC,
    Account,
    ServicePrefix,
    LBServiceGroup,
    GWProxy,
    GWRoute,
    GWEndpointSlice,
    LoadBalancer,
    RemoteEndpoint,
    VirtualService,
    ClusterRoutedIPClass,
    RoutedIP,
    Goop,
)


def kind_for(api_version: str, kind: str) -> type[CustomResource[Any, Any]]:
    """The model of a kind, by apiVersion and kind; KeyError names what is unknown."""
    for model in ALL_KINDS:
        if (model.resource.api_version, model.resource.kind) == (api_version, kind):
            return model
    raise KeyError(f"unknown kind {kind} in {api_version}")


def parse(obj: dict[str, Any]) -> CustomResource[Any, Any]:
    """Validate any tollgate object into its model."""
    return kind_for(str(obj.get("apiVersion")), str(obj.get("kind"))).model_validate(obj)


__all__ = [
    "ALL_KINDS",
    "EPIC",
    "Account",
    "ClusterRoutedIPClass",
    "Condition",
    "CustomResource",
    "GWEndpointSlice",
    "GWProxy",
    "GWRoute",
    "Goop",
    "LBServiceGroup",
    "LoadBalancer",
    "RemoteEndpoint",
    "ResourceInfo",
    "RoutedIP",
    "ServicePrefix",
    "Status",
    "VirtualService",
    "WireModel",
    "kind_for",
    "parse",
]
