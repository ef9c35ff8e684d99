"""`python -m tollgate.allocator`: the EPIC data model, tunnel IDs and endpoint registration over gRPC."""

from __future__ import annotations

import sys

from pydantic_settings import SettingsConfigDict

from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_ALLOCATOR_", extra="ignore")

    service_name: str = "tollgate-allocator"


async def main(settings: Settings, context: ServiceContext) -> None:
    raise NotImplementedError("tollgate.allocator is not implemented yet (issue #4)")


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.allocator", __doc__ or "", Settings, main))
