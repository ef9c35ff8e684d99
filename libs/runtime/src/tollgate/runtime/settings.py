"""Settings from environment variables: every service subclasses ServiceSettings with its own prefix."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tollgate.models.addresses import DEFAULT_DENIED_RANGES, EndpointPolicy, parse_ranges
from tollgate.models.routedip import DIGITALOCEAN_API_URL, JOB_SERVICE_ACCOUNT, Trust
from tollgate.runtime.kube import KubeTimeouts

ROUTEDIP_API_URLS = "TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS"
ROUTEDIP_HTTP_HOSTS = "TOLLGATE_ROUTEDIP_DIGITALOCEAN_HTTP_HOSTS"
ROUTEDIP_JOB_SERVICE_ACCOUNT = "TOLLGATE_ROUTEDIP_JOB_SERVICE_ACCOUNT"


class ServiceSettings(BaseSettings):
    """What every tollgate service reads from its environment (prefix `TOLLGATE_`, or the service's own)."""

    model_config = SettingsConfigDict(env_prefix="TOLLGATE_", extra="ignore")

    service_name: str = Field(default="tollgate", description="Name in logs, spans and metrics.")
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$")
    log_format: str = Field(default="json", pattern=r"^(json|text)$")
    health_host: str = "0.0.0.0"
    health_port: int = Field(default=8080, ge=0, le=65535, description="/healthz, /readyz and /metrics; 0 picks one.")
    kubeconfig: Path | None = Field(default=None, description="Kubeconfig file; in-cluster config when unset.")
    namespace: str | None = Field(default=None, description="Namespace to watch; all namespaces when unset.")
    kube_request_timeout_seconds: float = Field(
        default=30.0, gt=0, le=600, description="Longest wait for one Kubernetes API request (watches excepted)."
    )
    kube_connect_timeout_seconds: float = Field(
        default=10.0, gt=0, le=600, description="Longest wait to connect to the Kubernetes API server."
    )
    watch_timeout_seconds: int = Field(
        default=300,
        ge=5,
        le=3600,
        description="Server-side length of one watch request; a watch silent for longer (plus 10%, at least 5 s) "
        "is given up on and reopened, so a half-open connection cannot hang it.",
    )

    def kube_timeouts(self) -> KubeTimeouts:
        return KubeTimeouts(
            request=self.kube_request_timeout_seconds,
            connect=self.kube_connect_timeout_seconds,
            watch=self.watch_timeout_seconds,
        )


class ControllerSettings(ServiceSettings):
    """A controller that must not act from two replicas at once: it can hold a Lease while it works."""

    leader_election: bool = Field(
        default=False,
        description="Act only while holding the Lease named after the service; other replicas stand by.",
    )
    lease_namespace: str | None = Field(default=None, description="Namespace of the Lease (POD_NAMESPACE when unset).")
    lease_duration_seconds: float = Field(
        default=15.0, ge=2, le=300, description="Seconds a Lease nobody renews stays held before a standby takes over."
    )


class RoutedIPTrustSettings(BaseSettings):
    """What a ClusterRoutedIPClass may ask of the routedip controller (tollgate.models.routedip.Trust). The
    controller acts by it and the webhook judges classes by it, so both read these same variables, whatever their
    own prefix; both charts set them from one value, `routedipTrust` (tollgate-common's `tollgate.routedipTrust`)."""

    routedip_api_urls: str = Field(
        default=DIGITALOCEAN_API_URL,
        validation_alias=AliasChoices(ROUTEDIP_API_URLS),
        description="Comma-separated allow-list of DigitalOcean API origins (scheme://host[:port]) a class's "
        "spec.digitalocean.apiURL may name: the class's API token is sent there.",
    )
    routedip_http_hosts: str = Field(
        default="",
        validation_alias=AliasChoices(ROUTEDIP_HTTP_HOSTS),
        description="Comma-separated host:port of allow-listed API origins that may be plain http (a fake API on "
        "loopback in tests); empty in production, where the token only travels over https.",
    )
    routedip_job_service_account: str = Field(
        default=JOB_SERVICE_ACCOUNT,
        validation_alias=AliasChoices(ROUTEDIP_JOB_SERVICE_ACCOUNT),
        description="The only ServiceAccount a job provider template may name, and the one its pods run as (the "
        "routedip chart provides it, with no permissions).",
    )

    def routed_ip_trust(self) -> Trust:
        """The Trust these settings describe; ValueError naming the variable when an allowed URL breaks the rule."""
        return Trust.parse(
            self.routedip_api_urls, self.routedip_http_hosts, self.routedip_job_service_account, ROUTEDIP_API_URLS
        )


class EndpointPolicySettings(BaseSettings):
    """The endpoint address policy (tollgate.models.addresses), for the services that enforce it: the webhook at
    admission, the allocator at registration and xds before it serves a VirtualService."""

    endpoint_denied_ranges: str = Field(
        default=",".join(DEFAULT_DENIED_RANGES),
        description="Comma-separated CIDRs no endpoint may be in: the cluster's own pod and Service ranges.",
    )
    endpoint_allowed_ranges: str = Field(
        default="",
        description="Comma-separated CIDRs carved out of the denied ranges and the built-in refusals (loopback, "
        "link-local, ...): the most specific matching range decides.",
    )

    @field_validator("endpoint_denied_ranges", "endpoint_allowed_ranges")
    @classmethod
    def _ranges(cls, value: str, info: ValidationInfo) -> str:
        parse_ranges(value, info.field_name or "ranges")
        return value

    def endpoint_policy(self) -> EndpointPolicy:
        return EndpointPolicy.parse(self.endpoint_denied_ranges, self.endpoint_allowed_ranges)
