"""Settings from environment variables: every service subclasses ServiceSettings with its own prefix."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
