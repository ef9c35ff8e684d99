"""What a VirtualService's status says, from its IR and where each Envoy stands with it. No I/O.

Conditions: `Accepted` (the spec translates), `Conflicted` (another source on the same Envoy holds one of its
names or ports) and `Programmed` (every Envoy it applies to runs its latest version), with the counts in
`proxies`/`programmed_proxies`, one entry per Envoy in `envoys`, and the Envoy names of its listeners and
clusters in `envoy_names`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tollgate.models.servicemesh import MAX_ENVOYS_IN_STATUS, EnvoyNames, EnvoySync, VirtualServiceStatus
from tollgate.xds import ir
from tollgate.xds.streams import OwnerState

MAX_MESSAGES = 5


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


def virtual_service_status(
    source: ir.Source,
    envoys: Iterable[EnvoyView],
    conflicts: Iterable[ir.Conflict],
    previous: VirtualServiceStatus | None = None,
) -> VirtualServiceStatus:
    views = sorted(envoys, key=lambda v: v.node)
    status = VirtualServiceStatus(conditions=list(previous.conditions) if previous else [])
    generation = source.generation
    status.observed_generation = generation

    if source.errors:
        status.set_condition("Accepted", "False", "Invalid", _join(source.errors), generation)
    else:
        status.set_condition("Accepted", "True", "Accepted", f"{len(source.units)} listener(s) translated", generation)

    messages = [c.message_for(source.ref) for c in conflicts]
    if messages:
        status.set_condition("Conflicted", "True", "NameConflict", _join(messages), generation)
    else:
        status.set_condition("Conflicted", "False", "NoConflicts", "", generation)

    programmed = [v for v in views if v.state == "Programmed"]
    rejected = [v for v in views if v.state == "Rejected"]
    if not views:
        status.set_condition(
            "Programmed",
            "False",
            "NoEnvoys",
            f"no connected Envoy matches selector {selector_text(source.selector)}",
            generation,
        )
    elif rejected:
        text = _join(f"Envoy {v.node} rejected generation {generation}: {v.error}" for v in rejected)
        status.set_condition("Programmed", "False", "Rejected", text, generation)
    elif len(programmed) == len(views):
        status.set_condition(
            "Programmed",
            "True",
            "Programmed",
            f"{len(views)}/{len(views)} Envoys run generation {generation}",
            generation,
        )
    else:
        status.set_condition(
            "Programmed",
            "False",
            "Pending",
            f"{len(programmed)}/{len(views)} Envoys run generation {generation}",
            generation,
        )
    status.proxies = len(views)
    status.programmed_proxies = len(programmed)
    status.envoys = [
        EnvoySync(node=v.node, state=v.state, generation=v.generation) for v in views[:MAX_ENVOYS_IN_STATUS]
    ]
    status.envoy_names = envoy_names(source.units)
    return status
