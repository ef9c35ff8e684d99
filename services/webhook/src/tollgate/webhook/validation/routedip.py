"""The rules of `routedip.tollgate.io` (tollgate.models.routedip): ClusterRoutedIPClasses and RoutedIPs."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from ipaddress import IPv4Address

from tollgate.models import ClusterRoutedIPClass, RoutedIP
from tollgate.models.routedip import class_trust_rules, parse_port_range, service_ref_rule
from tollgate.webhook.validation.common import JSONObject, Review, Violation, holder, reference, spec_of, unicast


def routed_ip_key(obj: JSONObject) -> list[Hashable]:
    value = spec_of(obj).get("routedIP")
    try:
        return [str(IPv4Address(value))] if isinstance(value, str) else []
    except ValueError:
        return [value]


def routed_ip_class_violations(resource: ClusterRoutedIPClass, review: Review) -> Iterator[Violation]:
    class_name = resource.spec.class_name
    for other in review.others(ClusterRoutedIPClass, "className", class_name):
        yield Violation(
            "spec.className", f"className {class_name!r} is already served by ClusterRoutedIPClass {reference(other)}"
        )
    for _, path, rule in class_trust_rules(resource.spec, review.limits.routed_ip_trust):
        yield Violation(path, rule)


def routed_ip_violations(resource: RoutedIP, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    yield from unicast(spec.routed_ip, "spec.routedIP")
    refused = service_ref_rule(review.namespace, spec.service_ref.namespace)
    if refused:
        yield Violation("spec.serviceRef.namespace", refused)
    if not review.existing(ClusterRoutedIPClass, "className", spec.class_name):
        yield Violation("spec.className", f"no ClusterRoutedIPClass has className {spec.class_name!r}", pending=True)
    for other in review.others(RoutedIP, "routedIP", str(spec.routed_ip)):
        yield Violation(
            "spec.routedIP",
            f"{spec.routed_ip} is already routed by {holder(review, 'RoutedIP', other)}: one RoutedIP per address",
        )


def raw_node_port_range(obj: JSONObject) -> Iterator[Violation]:
    """Checked on the raw object: the model's own check of the range names the spec, not the field."""
    value = spec_of(obj).get("nodePortRange")
    if isinstance(value, str):
        try:
            parse_port_range(value)
        except ValueError as error:
            yield Violation("spec.nodePortRange", str(error))
