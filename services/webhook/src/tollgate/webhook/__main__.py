"""`python -m tollgate.webhook`: Admission webhook (FastAPI) that defaults and validates every tollgate kind."""

from __future__ import annotations

import sys

from pydantic_settings import SettingsConfigDict

from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_WEBHOOK_", extra="ignore")

    service_name: str = "tollgate-webhook"


async def main(settings: Settings, context: ServiceContext) -> None:
    raise NotImplementedError("tollgate.webhook is not implemented yet (issue #8)")


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.webhook", __doc__ or "", Settings, main))
