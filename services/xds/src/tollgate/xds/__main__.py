"""`python -m tollgate.xds`: Turns VirtualServices and load balancers into Envoy configuration served over gRPC ADS."""

from __future__ import annotations

import sys

from pydantic_settings import SettingsConfigDict

from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_XDS_", extra="ignore")

    service_name: str = "tollgate-xds"


async def main(settings: Settings, context: ServiceContext) -> None:
    raise NotImplementedError("tollgate.xds is not implemented yet (issue #5)")


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.xds", __doc__ or "", Settings, main))
