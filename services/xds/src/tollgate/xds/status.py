"""What a VirtualService's status says, from its IR and where each Envoy stands with it. No I/O.

Each replica of tollgate-xds reports on the Envoys connected to it (`replica_report`) under its own key of
`status.replicas`; the rest of the status merges the reports of the live replicas (`virtual_service_status`), so
that every replica computes the same status from the same reports and none undoes another's.

Conditions: `Accepted` (the spec translates), `Conflicted` (another source on the same Envoy holds one of its
names or ports) and `Programmed` (every Envoy it applies to runs its latest version; False with reason
`EndpointRefused`, like Accepted, when the endpoint address policy refuses an endpoint), with the counts in
`proxies`/`programmed_proxies`, one entry per Envoy in `envoys`, and the Envoy names of its listeners and
clusters in `envoy_names`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tollgate.models.servicemesh import (
    MAX_ENVOYS_IN_STATUS,
    EnvoyNames,
    EnvoySync,
    ReplicaReport,
    VirtualServiceStatus,
)
from tollgate.xds import ir
from tollgate.xds.streams import OwnerState

MAX_MESSAGES = 5
# The reason of Accepted and Programmed when the endpoint address policy refuses an endpoint's address.
ENDPOINT_REFUSED = "EndpointRefused"


@dataclass(frozen=True)
class EnvoyView:
    node: str
    state: OwnerState
    generation: int | None = None
    error: str = ""


def _join(messages: Iterable[str]) -> str:
    unique = list(dict.fromkeys(messages))
    more = f" (and {len(unique) - MAX_MESSAGES} more)" if len(unique) > MAX_MESSAGES else ""
    return "; ".join(unique[:MAX_MESSAGES]) + more


def envoy_names(units: Iterable[ir.Listener]) -> list[EnvoyNames]:
    """What a VirtualService's listeners and their clusters are called in Envoy."""
    return [
        EnvoyNames(
            listener=unit.spec_name,
            envoy_listener=unit.name,
            cluster=unit.cluster.spec_name,
            envoy_cluster=unit.cluster.name,
        )
        for unit in units
    ]


def selector_text(selector: ir.ProxySelector) -> str:
    labels = ",".join(f"{k}={v}" for k, v in selector.match) or "(every pod)"
    return f"{labels} in namespace {selector.namespace}" if selector.namespace else labels


def replica_report(source: ir.Source, envoys: Iterable[EnvoyView], conflicts: Iterable[ir.Conflict]) -> ReplicaReport:
    """What one replica sees of a VirtualService on the Envoys connected to it."""
    views = sorted(envoys, key=lambda v: v.node)
    return ReplicaReport(
        generation=source.generation,
        proxies=len(views),
        programmed_proxies=sum(1 for v in views if v.state == "Programmed"),
        envoys=[EnvoySync(node=v.node, state=v.state, generation=v.generation) for v in views[:MAX_ENVOYS_IN_STATUS]],
        rejected=[
            f"Envoy {v.node} rejected generation {source.generation}: {v.error}" for v in views if v.state == "Rejected"
        ],
        conflicts=list(dict.fromkeys(c.message_for(source.ref) for c in conflicts)),
    )


def virtual_service_status(
    source: ir.Source,
    reports: Mapping[str, ReplicaReport],
    previous: VirtualServiceStatus | None = None,
) -> VirtualServiceStatus:
    """The status from the reports of the live replicas: the same on every replica that has the same reports."""
    ordered = [reports[replica] for replica in sorted(reports)]
    status = VirtualServiceStatus(conditions=list(previous.conditions) if previous else [])
    generation = source.generation
    status.observed_generation = generation

    refused = _join(source.refusals)
    if refused:
        status.set_condition("Accepted", "False", ENDPOINT_REFUSED, refused, generation)
    elif source.errors:
        status.set_condition("Accepted", "False", "Invalid", _join(source.errors), generation)
    else:
        status.set_condition("Accepted", "True", "Accepted", f"{len(source.units)} listener(s) translated", generation)

    messages = sorted({m for r in ordered for m in r.conflicts})
    if messages:
        status.set_condition("Conflicted", "True", "NameConflict", _join(messages), generation)
    else:
        status.set_condition("Conflicted", "False", "NoConflicts", "", generation)

    proxies = sum(r.proxies for r in ordered)
    programmed = sum(r.programmed_proxies for r in ordered)
    rejected = sorted({m for r in ordered for m in r.rejected})
    if refused:
        status.set_condition("Programmed", "False", ENDPOINT_REFUSED, f"served to no Envoy: {refused}", generation)
    elif not proxies:
        status.set_condition(
            "Programmed",
            "False",
            "NoEnvoys",
            f"no connected Envoy matches selector {selector_text(source.selector)}",
            generation,
        )
    elif rejected:
        status.set_condition("Programmed", "False", "Rejected", _join(rejected), generation)
    elif programmed == proxies:
        status.set_condition(
            "Programmed", "True", "Programmed", f"{proxies}/{proxies} Envoys run generation {generation}", generation
        )
    else:
        status.set_condition(
            "Programmed", "False", "Pending", f"{programmed}/{proxies} Envoys run generation {generation}", generation
        )
    status.proxies = proxies
    status.programmed_proxies = programmed
    status.envoys = sorted((e for r in ordered for e in r.envoys), key=lambda e: e.node)[:MAX_ENVOYS_IN_STATUS]
    status.envoy_names = envoy_names(source.units)
    status.replicas = dict(reports)
    return status
