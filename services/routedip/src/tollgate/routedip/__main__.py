"""`python -m tollgate.routedip`: routed IPs kept on an eligible node backing a Service, with firewall ports."""

from __future__ import annotations

import sys

from pydantic_settings import SettingsConfigDict

from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_ROUTEDIP_", extra="ignore")

    service_name: str = "tollgate-routedip"


async def main(settings: Settings, context: ServiceContext) -> None:
    raise NotImplementedError("tollgate.routedip is not implemented yet (issue #6)")


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.routedip", __doc__ or "", Settings, main))
