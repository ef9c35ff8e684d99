"""`python -m tollgate.jobs`: The Goop controller: fans out worker Jobs (or one per node) and reports completion."""

from __future__ import annotations

import sys

from pydantic_settings import SettingsConfigDict

from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_JOBS_", extra="ignore")

    service_name: str = "tollgate-jobs"


async def main(settings: Settings, context: ServiceContext) -> None:
    raise NotImplementedError("tollgate.jobs is not implemented yet (issue #7)")


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.jobs", __doc__ or "", Settings, main))
