"""`python -m tollgate.routedip`: routed IPs kept on an eligible node backing a Service, with firewall ports."""

from __future__ import annotations

import sys

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from tollgate.routedip.config import FAILPOINTS, ControllerConfig
from tollgate.routedip.controller import Controller
from tollgate.routedip.handlers import build_registry
from tollgate.routedip.k8s import Kube
from tollgate.runtime.leader import lease_config
from tollgate.runtime.operator import run_operator
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ControllerSettings, RoutedIPTrustSettings


class Settings(ControllerSettings, RoutedIPTrustSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_ROUTEDIP_", extra="ignore")

    service_name: str = "tollgate-routedip"
    system_namespace: str = Field(
        default="tollgate-system",
        validation_alias=AliasChoices("TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE", "POD_NAMESPACE"),
        description="Namespace the controller runs in: Job-provider Jobs run here, fromSecretsRef Secrets live here "
        "(POD_NAMESPACE when unset).",
    )
    workers: int = Field(default=32, ge=1, le=256, description="Routed IPs reconciled at once.")
    job_wait_timeout: float = Field(default=120.0, gt=0, description="Seconds to wait for a provider Job per pass.")
    token_secrets: str | None = Field(
        default=None,
        description="Comma-separated names of the Secrets the controller may read (the chart's tokenSecrets): a "
        "class naming another gets Accepted=False SecretNotAllowed. Unset: any Secret of its namespace.",
    )
    failpoints: str = Field(
        default="",
        description=f"Comma-separated crash points for resilience tests ({', '.join(FAILPOINTS)}): the process exits "
        "abruptly on reaching one.",
    )


async def main(settings: Settings, context: ServiceContext) -> None:
    failpoints = frozenset(p.strip() for p in settings.failpoints.split(",") if p.strip())
    unknown = failpoints - set(FAILPOINTS)
    if unknown:
        raise ValueError(f"TOLLGATE_ROUTEDIP_FAILPOINTS: unknown failpoint(s) {sorted(unknown)}; known: {FAILPOINTS}")
    trust = settings.routed_ip_trust()
    kube = Kube(settings.kubeconfig, threads=max(8, settings.workers * 2))
    config = ControllerConfig(
        system_namespace=settings.system_namespace,
        workers=settings.workers,
        failpoints=failpoints,
        job_wait_timeout=settings.job_wait_timeout,
        trust=trust,
        token_secrets=None
        if settings.token_secrets is None
        else frozenset(name.strip() for name in settings.token_secrets.split(",") if name.strip()),
    )
    controller = Controller(kube, config, context.telemetry)
    try:
        await run_operator(settings, context, build_registry(controller), lease_config(settings))
    finally:
        await controller.stop()
        kube.close()


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.routedip", __doc__ or "", Settings, main))
