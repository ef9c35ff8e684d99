"""Validation beyond the CRD schemas: cross-field and cross-object rules, each naming the field and the rule.

Pure: the objects other than the one under review come from a `View` (the informer cache), and every rule
returns all of its violations, so the whole object is rejected at once with everything wrong with it.

One module per API group, as in tollgate.models (epic, gateway, servicemesh, routedip, goop), the rules they share
in `common`; the tables below say which function judges which kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pydantic import ValidationError

from tollgate.models import (
    EPIC,
    Account,
    ClusterRoutedIPClass,
    CustomResource,
    Goop,
    GWEndpointSlice,
    GWProxy,
    GWRoute,
    LBServiceGroup,
    LoadBalancer,
    RemoteEndpoint,
    RoutedIP,
    ServicePrefix,
    VirtualService,
)
from tollgate.webhook.kinds import Model
from tollgate.webhook.validation.common import (
    IndexFunc,
    JSONObject,
    Limits,
    Review,
    View,
    Violation,
    every_object,
    field_path,
    from_pydantic,
    identity,
    spec_of,
    spec_scalar,
)
from tollgate.webhook.validation.epic import (
    account_violations,
    endpoint_identity,
    epic_deletion_violations,
    epic_violations,
    gw_proxy_violations,
    lb_service_group_violations,
    load_balancer_violations,
    remote_endpoint_violations,
    service_prefix_violations,
)
from tollgate.webhook.validation.gateway import gw_endpoint_slice_violations, gw_route_violations
from tollgate.webhook.validation.goop import goop_violations
from tollgate.webhook.validation.routedip import (
    raw_node_port_range,
    routed_ip_class_violations,
    routed_ip_key,
    routed_ip_violations,
)
from tollgate.webhook.validation.servicemesh import (
    listener_ports,
    port_label_values,
    port_labels,
    raw_udp_only_fields,
    virtual_service_violations,
)

__all__ = [
    "DELETION_RULES",
    "INDEXES",
    "IndexFunc",
    "JSONObject",
    "Limits",
    "View",
    "Violation",
    "field_path",
    "identity",
    "parse",
    "validate",
    "validate_deletion",
]

# The kinds the cache keeps, and the indexes of each that the cross-object rules read.
INDEXES: dict[Model, dict[str, IndexFunc]] = {
    VirtualService: {
        "port": listener_ports,
        "port-label": port_labels,
        "port-label-value": port_label_values,
    },
    Account: {},
    LBServiceGroup: {"all": every_object},
    LoadBalancer: {
        "public-address": spec_scalar("public-address"),
        "namespace": lambda obj: [identity(obj)[0]],
        "all": every_object,
    },
    GWProxy: {
        "public-address": spec_scalar("public-address"),
        "namespace": lambda obj: [identity(obj)[0]],
        "all": every_object,
    },
    RemoteEndpoint: {"identity": endpoint_identity},
    ClusterRoutedIPClass: {"className": spec_scalar("className")},
    RoutedIP: {"routedIP": routed_ip_key},
}

Rule = Callable[[Any, Review], Iterator[Violation]]

RULES: dict[Model, Rule] = {
    EPIC: epic_violations,
    Account: account_violations,
    LBServiceGroup: lb_service_group_violations,
    LoadBalancer: load_balancer_violations,
    GWProxy: gw_proxy_violations,
    GWRoute: gw_route_violations,
    GWEndpointSlice: gw_endpoint_slice_violations,
    ServicePrefix: service_prefix_violations,
    RemoteEndpoint: remote_endpoint_violations,
    VirtualService: virtual_service_violations,
    ClusterRoutedIPClass: routed_ip_class_violations,
    RoutedIP: routed_ip_violations,
    Goop: goop_violations,
}

# Only the deletions a rule guards reach the webhook (registration.py asks for DELETE for them).
DeletionRule = Callable[[str, str, View], Iterator[Violation]]

DELETION_RULES: dict[Model, DeletionRule] = {EPIC: epic_deletion_violations}

# Checks on the raw object, before the model reads it.
RawCheck = Callable[[JSONObject], Iterator[Violation]]

RAW_CHECKS: dict[Model, RawCheck] = {
    ClusterRoutedIPClass: raw_node_port_range,
    VirtualService: raw_udp_only_fields,
}


def _no_raw_checks(obj: JSONObject) -> Iterator[Violation]:
    return iter(())


def validate_deletion(model: Model, namespace: str, name: str, view: View) -> list[Violation]:
    """Why the object may not be deleted now; empty when it may."""
    rule = DELETION_RULES.get(model)
    return list(rule(namespace, name, view)) if rule is not None else []


def parse(model: Model, obj: JSONObject) -> tuple[CustomResource[Any, Any] | None, list[Violation]]:
    """The object as its model (None when refused) and what breaks the model's own rules, named by field."""
    body = {key: value for key, value in obj.items() if key != "status"}
    raw = list(RAW_CHECKS.get(model, _no_raw_checks)(body))
    try:
        return model.model_validate(body), raw
    except ValidationError as error:
        reported = {violation.field for violation in raw}
        # A model validator reports at its model's path; drop it where a raw check already named the field.
        duplicates = reported | {field.rpartition(".")[0] for field in reported}
        return None, raw + [violation for violation in from_pydantic(error) if violation.field not in duplicates]


def validate(
    model: Model,
    obj: JSONObject,
    old: JSONObject | None,
    *,
    namespace: str,
    name: str,
    view: View,
    limits: Limits,
) -> list[Violation]:
    """Every rule `obj` breaks; empty when it may be stored. `old` is the stored object on an update."""
    resource, violations = parse(model, obj)
    if resource is None:
        return violations
    old_spec = spec_of(old) if old is not None else None
    review = Review(namespace=namespace, name=name, old_spec=old_spec, view=view, limits=limits)
    return violations + list(RULES[model](resource, review))
