from __future__ import annotations

from typing import Annotated

import dagger
from dagger import DefaultPath, Doc, dag, function, object_type

SERVICES = ("allocator", "xds", "routedip", "jobs", "webhook")
GO_IMAGE = "golang:1.26-bookworm"
Source = Annotated[dagger.Directory, DefaultPath(".."), Doc("the tollgate checkout")]


@object_type
class TollgateCi:
    """lint, test, build and e2e: each one `make` target inside a container."""

    def _toolbox(self, source: dagger.Directory) -> dagger.Container:
        """Go (for the control-plane binaries) plus Python 3.11, with the caches kept between runs."""
        return (
            dag.container()
            .from_(GO_IMAGE)
            .with_exec(["apt-get", "update", "-qq"])
            .with_exec(["apt-get", "install", "-y", "-qq", "python3", "python3-venv", "make"])
            .with_mounted_cache("/root/.cache", dag.cache_volume("tollgate-cache"))
            .with_mounted_cache("/go/pkg/mod", dag.cache_volume("tollgate-gomod"))
            .with_directory("/src", source, exclude=[".venv", ".dev", "**/__pycache__"])
            .with_workdir("/src")
        )

    @function
    async def lint(self, source: Source) -> str:
        """ruff, mypy and the generated-file drift checks."""
        return await self._toolbox(source).with_exec(["make", "lint"]).stdout()

    @function
    async def test(self, source: Source) -> str:
        """Everything CI runs: `make test` (lint, unit and end-to-end on the embedded cluster)."""
        return await self._toolbox(source).with_env_variable("CI", "true").with_exec(["make", "test"]).stdout()

    @function
    async def e2e(self, source: Source) -> str:
        """Only the end-to-end suite, against the embedded cluster started inside the container."""
        return (
            await self._toolbox(source)
            .with_exec(["make", "sync", "tools", "charts"])
            .with_exec(["/root/.cache/tollgate/uv/bin/uv", "run", "--frozen", "pytest", "tests/e2e"])
            .stdout()
        )

    @function
    def build(
        self, source: Source, service: Annotated[str, Doc("one of allocator, xds, routedip, jobs, webhook")]
    ) -> dagger.Container:
        """The service's image, from its Dockerfile (the same one `make docker-build` uses)."""
        if service not in SERVICES:
            raise ValueError(f"service: {service!r} is not one of {', '.join(SERVICES)}")
        return source.docker_build(dockerfile=f"services/{service}/Dockerfile")
