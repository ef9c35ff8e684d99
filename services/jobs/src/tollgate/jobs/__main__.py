"""`python -m tollgate.jobs`: The Goop controller: fans out worker Jobs (or one per node) and reports completion."""

from __future__ import annotations

import sys

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tollgate.jobs.cache import ClusterCache
from tollgate.jobs.controller import Reconciler, Tuning
from tollgate.jobs.handlers import Watched, build_registry
from tollgate.jobs.k8s import GoopApi
from tollgate.runtime.kube import api_client
from tollgate.runtime.leader import lease_config
from tollgate.runtime.operator import run_operator
from tollgate.runtime.resync import Mirror
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ControllerSettings


class Settings(ControllerSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_JOBS_", extra="ignore")

    service_name: str = "tollgate-jobs"
    max_backoff_seconds: float = Field(default=60.0, gt=0, description="Longest pause before retrying a reconcile.")
    workers: int = Field(default=32, gt=0, description="Goops reconciled at the same time.")
    name_taken_retry_seconds: float = Field(
        default=30.0, gt=0, description="Pause before retrying a worker whose Job name another object holds."
    )
    job_batch_seconds: float = Field(
        default=0.5,
        ge=0,
        description="Window in which a Goop's Job events are batched into one reconcile (and one status write); "
        "a Job that failed or finished the Goop's last one is acted on at once.",
    )
    resync_period_seconds: float = Field(
        default=300.0,
        gt=0,
        description="List the Goops, their Jobs and the nodes again this often (give or take 10%) and act on what "
        "the watches missed (a Job deleted, say); the first time 15 s after startup at most.",
    )


async def main(settings: Settings, context: ServiceContext) -> None:
    tuning = Tuning(
        max_backoff=settings.max_backoff_seconds,
        taken_retry=settings.name_taken_retry_seconds,
        workers=settings.workers,
        job_batch=settings.job_batch_seconds,
    )
    api, cache = GoopApi(api_client(settings.kubeconfig)), ClusterCache()
    reconciler = Reconciler(api, cache, context.telemetry, tuning)
    registry = build_registry(
        Watched(reconciler, cache, Mirror()), api, settings.namespace, settings.resync_period_seconds
    )
    try:
        await run_operator(settings, context, registry, lease_config(settings))
    finally:
        await reconciler.close()


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.jobs", __doc__ or "", Settings, main))
