"""`routedip.tollgate.io/v1alpha1`: routed IPs (seeds/routedip-operator.md). Wire names are camelCase."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel, opaque

GROUP = "routedip.tollgate.io"
VERSION = "v1alpha1"
DEFAULT_NODE_PORT_RANGE = "30000-32767"
MOVE_TAINT_KEY = "routedip.tollgate.io/move-in-progress"
DIGITALOCEAN_API_URL = "https://api.digitalocean.com"
# The ServiceAccount the chart provides for the job provider's pods (it is granted nothing).
JOB_SERVICE_ACCOUNT = "tollgate-routedip-job"


def parse_port_range(text: str) -> tuple[int, int]:
    """`30000-32767` -> (30000, 32767); raises ValueError naming the rule."""
    low_text, sep, high_text = text.partition("-")
    if not sep or not low_text.isdigit() or not high_text.isdigit():
        raise ValueError(f"{text!r} is not a port range of the form LOW-HIGH")
    low, high = int(low_text), int(high_text)
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"{text!r}: need 1 <= LOW <= HIGH <= 65535")
    return low, high


class SecretReference(WireModel):
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(min_length=1, max_length=63)


class DigitalOceanSettings(WireModel):
    firewall_id: str | None = Field(
        default=None,
        alias="firewallID",
        description="Cloud Firewall dedicated to this class: its droplets and inbound rules are managed entirely.",
    )
    api_url: str = Field(
        default=DIGITALOCEAN_API_URL,
        alias="apiURL",
        description="Base URL of the API: https, and one of the allow-list the controller and webhook are given.",
    )
    token_key: str = Field(default="token", alias="tokenKey", description="Key of the API token in the Secret.")


class ClusterRoutedIPClassSpec(WireModel):
    class_name: str = Field(alias="className", min_length=1, max_length=253)
    provider: Literal["job", "digitalocean", "local"] = Field(
        default="job", description="What assigns the IP and opens the firewall."
    )
    firewall_post_allow: bool = Field(
        default=False,
        alias="firewallPostAllow",
        description="Open the firewall only after the IP is assigned.",
    )
    node_port_range: str = Field(
        default=DEFAULT_NODE_PORT_RANGE,
        alias="nodePortRange",
        pattern=r"^[0-9]{1,5}-[0-9]{1,5}$",
        description="The cluster's Service node-port range (not discoverable through the API).",
    )
    per_node_ip_limit: int = Field(default=1, alias="perNodeIPLimit", ge=1, le=256)
    election_policy: Literal["Youngest", "Oldest"] = Field(
        default="Youngest", alias="electionPolicy", description="Which eligible node wins an election."
    )
    move_cooldown_seconds: int = Field(
        default=10,
        alias="moveCooldownSeconds",
        ge=0,
        description=(
            "Least time between two moves of one IP while its holder can still serve it (cordoned, tainted, over "
            "the limit); a holder that is NotReady, deleted or without a ready endpoint loses the IP at once."
        ),
    )
    from_secrets_ref: list[SecretReference] = Field(default_factory=list, alias="fromSecretsRef")
    update_routed_ip: dict[str, Any] | None = opaque("Job spec that assigns the IP (provider job).", "updateRoutedIP")
    update_firewall: dict[str, Any] | None = opaque(
        "Job spec that opens the firewall (provider job).", "updateFirewall"
    )
    digitalocean: DigitalOceanSettings | None = None

    @model_validator(mode="after")
    def _valid_range(self) -> ClusterRoutedIPClassSpec:
        parse_port_range(self.node_port_range)
        return self


class ClusterRoutedIPClassStatus(Status):
    pass


class ClusterRoutedIPClass(CustomResource[ClusterRoutedIPClassSpec, ClusterRoutedIPClassStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="ClusterRoutedIPClass",
        plural="clusterroutedipclasses",
        short_names=["ripclass"],
        scope="Cluster",
        categories=["tollgate", "routedip"],
        description="How routed IPs of a class are assigned and firewalled.",
        printer_columns=[
            PrinterColumn(name="Class", type="string", json_path=".spec.className"),
            PrinterColumn(name="Provider", type="string", json_path=".spec.provider"),
            PrinterColumn(name="Per-Node", type="integer", json_path=".spec.perNodeIPLimit"),
            PrinterColumn(name="Accepted", type="string", json_path='.status.conditions[?(@.type=="Accepted")].status'),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )


class ServiceReference(WireModel):
    service_name: str = Field(alias="serviceName", min_length=1, max_length=63)
    namespace: str = Field(min_length=1, max_length=63)


class RoutedIPSpec(WireModel):
    class_name: str = Field(alias="className", min_length=1, description="className of a ClusterRoutedIPClass.")
    routed_ip: IPv4Address = Field(alias="routedIP", description="The assignable IPv4 address.")
    service_ref: ServiceReference = Field(alias="serviceRef")


class RoutedIPStatus(Status):
    assigned_node: str | None = Field(default=None, alias="assignedNode", description="Node holding the IP.")
    last_move_time: str | None = Field(default=None, alias="lastMoveTime")
    target_node: str | None = Field(
        default=None, alias="targetNode", description="Node the IP is moving to, while a move is in progress."
    )


class RoutedIP(CustomResource[RoutedIPSpec, RoutedIPStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="RoutedIP",
        plural="routedips",
        short_names=["rip"],
        categories=["tollgate", "routedip"],
        description="A routed IP kept on a node backing a Service.",
        printer_columns=[
            PrinterColumn(name="IP", type="string", json_path=".spec.routedIP"),
            PrinterColumn(name="Class", type="string", json_path=".spec.className"),
            PrinterColumn(name="Service", type="string", json_path=".spec.serviceRef.serviceName"),
            PrinterColumn(name="Node", type="string", json_path=".status.assignedNode"),
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
            PrinterColumn(name="Target", type="string", json_path=".status.targetNode", priority=1),
        ],
    )


# ---- trust rules, shared by the webhook (at admission) and the controller (for what slipped past it) ----


def service_ref_rule(namespace: str, service_namespace: str) -> str | None:
    """Why a RoutedIP in `namespace` may not reference a Service of `service_namespace`, or None: a RoutedIP
    opens its Service's NodePorts in the cloud firewall, so it may only name a Service of its own namespace."""
    if service_namespace != namespace:
        return (
            f"must be the RoutedIP's own namespace {namespace!r} (got {service_namespace!r}): a RoutedIP "
            "may only route to a Service of its own namespace"
        )
    return None


def origin(url: str) -> str:
    """`scheme://host[:port]` of a URL, lower-cased, as allow-lists are written."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def api_url_rule(url: str, allowed: Collection[str], http_hosts: Collection[str] = ()) -> str | None:
    """Why the controller may not send a class's API token to `url`, or None. `allowed` lists origins
    (`https://api.digitalocean.com`); plain http is refused unless its `host:port` is in `http_hosts` too."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{url!r} is not an absolute https:// URL"
    if parts.username or parts.password or parts.query or parts.fragment:
        return f"{url!r}: credentials, query and fragment are not allowed in an API URL"
    if parts.scheme == "http" and parts.netloc.lower() not in {host.lower() for host in http_hosts}:
        return f"{url!r}: must be https (the API token travels with every request)"
    if origin(url) not in {origin(entry) for entry in allowed}:
        return f"{url!r} is not on the allow-list of API URLs ({', '.join(sorted(allowed)) or 'empty'})"
    return None


@dataclass(frozen=True)
class Trust:
    """What a class may ask of the controller: where its API token may be sent, which ServiceAccount its Jobs run
    as. The controller and the webhook are given the same (their settings)."""

    api_urls: tuple[str, ...] = (DIGITALOCEAN_API_URL,)
    http_hosts: frozenset[str] = frozenset()
    job_service_account: str = JOB_SERVICE_ACCOUNT

    @classmethod
    def parse(cls, api_urls: str, http_hosts: str, job_service_account: str, setting: str) -> Trust:
        """From comma-separated settings: every allowed URL must pass the rule (`setting` names the first)."""
        trust = cls(
            tuple(url.strip() for url in api_urls.split(",") if url.strip()),
            frozenset(host.strip() for host in http_hosts.split(",") if host.strip()),
            job_service_account,
        )
        for url in trust.api_urls:
            refused = api_url_rule(url, trust.api_urls, trust.http_hosts)
            if refused:
                raise ValueError(f"{setting}: {refused}")
        return trust


def job_template_rules(template: Mapping[str, Any], service_account: str) -> Iterator[tuple[str, str]]:
    """(field path under the Job spec, rule) for each privilege a job provider template asks for: its pods run
    in the controller's namespace, so they get the chart's unprivileged ServiceAccount and nothing of the host."""
    pod = (template.get("template") or {}).get("spec") or {}
    if not isinstance(pod, Mapping):
        return
    base = "template.spec"
    for key in ("serviceAccountName", "serviceAccount"):
        account = pod.get(key)
        if account not in (None, "", service_account):
            yield (
                f"{base}.{key}",
                f"must be {service_account!r}, the chart's ServiceAccount for Jobs (got {account!r})",
            )
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            yield f"{base}.{key}", "must not be true: provider Jobs do not share the node's namespaces"
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(pod.get(group) or []):
            context = (container.get("securityContext") if isinstance(container, Mapping) else None) or {}
            path = f"{base}.{group}[{index}].securityContext"
            if context.get("privileged"):
                yield f"{path}.privileged", "must not be true: provider Jobs run unprivileged"
            if context.get("allowPrivilegeEscalation"):
                yield f"{path}.allowPrivilegeEscalation", "must not be true: provider Jobs run unprivileged"
            if (context.get("capabilities") or {}).get("add"):
                yield f"{path}.capabilities.add", "must be empty: provider Jobs get no added capabilities"


def class_trust_rules(spec: ClusterRoutedIPClassSpec, trust: Trust) -> Iterator[tuple[str, str, str]]:
    """(reason, field, rule) for each thing a class asks beyond `trust`: the controller does not serve it."""
    if spec.provider == "digitalocean":
        refused = api_url_rule((spec.digitalocean or DigitalOceanSettings()).api_url, trust.api_urls, trust.http_hosts)
        if refused:
            yield "APIURLNotAllowed", "spec.digitalocean.apiURL", refused
    for name, template in (("updateRoutedIP", spec.update_routed_ip), ("updateFirewall", spec.update_firewall)):
        for path, rule in job_template_rules(template or {}, trust.job_service_account):
            yield "PrivilegedJobTemplate", f"spec.{name}.{path}", rule
