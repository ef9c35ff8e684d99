"""Whether a ClusterRoutedIPClass can be served, as a pure function: each problem names the field and rule."""

from __future__ import annotations

from collections.abc import Iterable

from tollgate.models.routedip import ClusterRoutedIPClassSpec, Trust, class_trust_rules
from tollgate.routedip.state import ClassState

# DigitalOcean allows one reserved IP per droplet.
DIGITALOCEAN_IPS_PER_DROPLET = 1


DEFAULT_TRUST = Trust()


def class_problems(
    state: ClassState,
    system_namespace: str,
    same_class_name: Iterable[str] = (),
    trust: Trust = DEFAULT_TRUST,
    token_secrets: frozenset[str] | None = None,
) -> list[tuple[str, str]]:
    """(reason, message) for everything that stops the class from being served; empty when it can be.
    `token_secrets`: the Secrets the controller may read (its chart's tokenSecrets); None: any of its namespace."""
    if state.spec is None:
        return [("InvalidSpec", state.spec_error or "spec: invalid")]
    spec = state.spec
    problems: list[tuple[str, str]] = []
    others = sorted(set(same_class_name) - {state.name})
    if others:
        problems.append(
            (
                "DuplicateClassName",
                f"spec.className: {spec.class_name!r} is also the className of ClusterRoutedIPClass "
                f"{', '.join(others)}; a className must name one class",
            )
        )
    for index, ref in enumerate(spec.from_secrets_ref):
        if ref.namespace != system_namespace:
            problems.append(
                (
                    "SecretOutOfReach",
                    f"spec.fromSecretsRef[{index}].namespace: must be {system_namespace!r}, the namespace "
                    f"tollgate-routedip runs in (got {ref.namespace!r})",
                )
            )
        elif token_secrets is not None and ref.name not in token_secrets:
            allowed = ", ".join(sorted(token_secrets)) or "none"
            problems.append(
                (
                    "SecretNotAllowed",
                    f"spec.fromSecretsRef[{index}].name: tollgate-routedip may read only the Secrets its chart's "
                    f"tokenSecrets lists ({allowed}), not {ref.name!r}",
                )
            )
    if spec.provider == "digitalocean":
        if spec.per_node_ip_limit > DIGITALOCEAN_IPS_PER_DROPLET:
            problems.append(
                (
                    "PerNodeIPLimitUnsupported",
                    f"spec.perNodeIPLimit: DigitalOcean allows {DIGITALOCEAN_IPS_PER_DROPLET} reserved IP per "
                    f"droplet; got {spec.per_node_ip_limit}",
                )
            )
        if not spec.from_secrets_ref:
            problems.append(
                (
                    "MissingCredentials",
                    "spec.fromSecretsRef: the digitalocean provider needs a Secret holding the API token "
                    f"(key {(spec.digitalocean.token_key if spec.digitalocean else 'token')!r})",
                )
            )
    if spec.provider == "job" and not spec.update_routed_ip:
        problems.append(("MissingJobTemplate", "spec.updateRoutedIP: required when spec.provider is job"))
    for field, template in (("updateRoutedIP", spec.update_routed_ip), ("updateFirewall", spec.update_firewall)):
        if template is None:
            continue
        pod_spec = (template.get("template") or {}).get("spec") or {}
        if not pod_spec.get("containers"):
            problems.append(
                (
                    "InvalidJobTemplate",
                    f"spec.{field}.template.spec.containers: a Job spec needs at least one container",
                )
            )
        elif pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(
                ("InvalidJobTemplate", f"spec.{field}.template.spec.restartPolicy: must be Never or OnFailure")
            )
    problems.extend(trust_problems(spec, trust))
    return problems


def trust_problems(spec: ClusterRoutedIPClassSpec, trust: Trust) -> list[tuple[str, str]]:
    """(reason, message) for what the class asks beyond its trust: the provider refuses to act on any of them."""
    return [(reason, f"{path}: {rule}") for reason, path, rule in class_trust_rules(spec, trust)]
