from __future__ import annotations

import asyncio
from typing import Annotated

import dagger
from dagger import DefaultPath, Doc, Ignore, dag, function, object_type

SERVICES = ("webhook", "allocator", "xds", "routedip", "jobs")
CHARTS = ("tollgate-crds", *(f"tollgate-{service}" for service in SERVICES))
GO_IMAGE = "golang:1.26-bookworm"
# Local state that no function needs: never uploaded to the engine (.dockerignore syntax, from the repository root).
IGNORED = [
    ".git",
    ".venv",
    ".dev",
    ".tilt*",
    "dist",
    "**/.mypy_cache",
    "**/.ruff_cache",
    "**/.pytest_cache",
    "**/.hypothesis",
    "**/__pycache__",
    "**/node_modules",
    "deploy/charts/*/charts",
]
Source = Annotated[dagger.Directory, DefaultPath("/"), Ignore(IGNORED), Doc("the tollgate checkout")]
TiltSource = Annotated[
    dagger.File,
    Doc("Tilt's offline source archive, beside the checkout: ../shared/vendor/tilt/tilt-<TILT_VERSION>-src.tar.xz"),
]
TILT_ARCHIVE = "/vendor/tilt-src.tar.xz"  # TILT_SOURCE_ARCHIVE of hack/tools.sh


@object_type
class TollgateCi:
    """lint, test and e2e (each one `make` target inside a container), build and publish."""

    def _toolbox(self, source: dagger.Directory) -> dagger.Container:
        """Go (for the control-plane binaries) plus Python 3.11, with the caches kept between runs."""
        return (
            dag.container()
            .from_(GO_IMAGE)
            .with_exec(["apt-get", "update", "-qq"])
            .with_exec(["apt-get", "install", "-y", "-qq", "python3", "python3-venv", "make"])
            .with_mounted_cache("/root/.cache", dag.cache_volume("tollgate-cache"))
            .with_mounted_cache("/go/pkg/mod", dag.cache_volume("tollgate-gomod"))
            .with_directory("/src", source)
            .with_workdir("/src")
        )

    @function
    async def lint(self, source: Source) -> str:
        """ruff, mypy and the generated-file drift checks."""
        return await self._toolbox(source).with_exec(["make", "lint"]).stdout()

    @function
    async def test(self, source: Source, tilt_source: TiltSource) -> str:
        """Everything CI runs: `make test` (lint, unit and end-to-end on the embedded cluster), with CI set."""
        # With CI set, a test whose tool is missing fails instead of skipping (tollgate.testing.requirements), so the
        # container must have everything: Tilt, built by `make tools` from the archive (the Go module proxy refuses
        # github.com/tilt-dev/tilt and this image has no Tilt), and root capabilities, which dockerd (make images)
        # and the real node (containerd, the CNI bridge, iptables, sysctls) need; make images installs their
        # Debian packages itself (make node-packages).
        return await (
            self._toolbox(source)
            .with_mounted_file(TILT_ARCHIVE, tilt_source)
            .with_env_variable("TILT_SOURCE_ARCHIVE", TILT_ARCHIVE)
            .with_env_variable("CI", "1")
            .with_exec(["make", "test"], insecure_root_capabilities=True)
            .stdout()
        )

    @function
    async def e2e(self, source: Source) -> str:
        """Only the end-to-end suite, against the embedded cluster started inside the container: a developer's run
        (CI unset), so what the container lacks (Tilt, the real node) is skipped, said so in the summary; `test` is
        CI's."""
        return (
            await self._toolbox(source)
            .with_exec(["make", "sync", "tools", "charts"])
            .with_exec(["/root/.cache/tollgate/uv/bin/uv", "run", "--frozen", "pytest", "tests/e2e"])
            .stdout()
        )

    @function
    def build(
        self, source: Source, service: Annotated[str, Doc("one of webhook, allocator, xds, routedip, jobs")]
    ) -> dagger.Container:
        """The service's runtime image, from its Dockerfile (the same one `make docker-build` uses)."""
        if service not in SERVICES:
            raise ValueError(f"service: {service!r} is not one of {', '.join(SERVICES)}")
        return self._image(source, service)

    def _image(self, source: dagger.Directory, service: str) -> dagger.Container:
        return source.docker_build(dockerfile=f"services/{service}/Dockerfile", target="runtime")

    # A push must happen on every call, not come from the function cache (7 days by default). dagger-io 0.21.11's
    # overloads of `function` lack `cache` (dagger/dagger#11572), hence the ignore.
    @function(cache="never")  # type: ignore[call-overload,untyped-decorator]
    async def publish(
        self,
        source: Source,
        image_prefix: Annotated[str, Doc("where the images go (IMG without the name): registry.example.com/team")],
        tag: Annotated[str, Doc("the images' tag, also the charts' appVersion (their default image tag)")],
        chart_repo: Annotated[str, Doc("OCI repository for the charts (default: oci://<image-prefix>/charts)")] = "",
        chart_version: Annotated[str, Doc("SemVer version of the charts (default: each Chart.yaml's version)")] = "",
        username: Annotated[str, Doc("registry user, with --password")] = "",
        password: Annotated[dagger.Secret | None, Doc("registry password or token, for images and charts")] = None,
    ) -> list[str]:
        """Push the five service images and the six Helm charts; return their references."""
        if password is not None and not username:
            raise ValueError("password: needs --username as well")
        prefix = image_prefix.rstrip("/")
        repo = (chart_repo or f"oci://{prefix}/charts").rstrip("/")
        if not repo.startswith("oci://"):
            raise ValueError(f"chart-repo: {chart_repo!r} is not an oci:// reference")

        async def push_image(service: str) -> str:
            image = self._image(source, service)
            if password is not None:
                image = image.with_registry_auth(prefix, username, password)
            return await image.publish(f"{prefix}/{service}:{tag}")

        images = await asyncio.gather(*(push_image(service) for service in SERVICES))
        return [*images, *await self._push_charts(source, prefix, tag, repo, chart_version, username, password)]

    async def _push_charts(
        self,
        source: dagger.Directory,
        prefix: str,
        tag: str,
        repo: str,
        version: str,
        username: str,
        password: dagger.Secret | None,
    ) -> list[str]:
        """`helm package` each chart (library chart vendored, images pointing at prefix) and `helm push` it."""
        install = '. hack/versions.env && GOBIN=/usr/local/bin go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"'
        helm = self._toolbox(source).with_exec(["sh", "-c", install])
        for chart in CHARTS:
            path = f"deploy/charts/{chart}"
            package = ["helm", "package", path, "--destination", f"/charts/{chart}", "--app-version", tag]
            if chart != "tollgate-crds":
                helm = helm.with_exec(
                    ["sed", "-i", f"s|^  repository: ghcr.io/tollgate/|  repository: {prefix}/|", f"{path}/values.yaml"]
                ).with_exec(["helm", "dependency", "update", "--skip-refresh", path])
            helm = helm.with_exec([*package, "--version", version] if version else package)
        push = 'helm push "/charts/$CHART/$ARCHIVE" "$REPO"'
        helm = helm.with_env_variable("REPO", repo)
        if password is not None:
            push += ' --username "$REGISTRY_USER" --password "$REGISTRY_PASSWORD"'
            helm = helm.with_env_variable("REGISTRY_USER", username).with_secret_variable("REGISTRY_PASSWORD", password)
        refs = []
        for chart in CHARTS:
            (archive,) = await helm.directory(f"/charts/{chart}").entries()
            helm = helm.with_env_variable("CHART", chart).with_env_variable("ARCHIVE", archive)
            helm = helm.with_exec(["sh", "-c", push])
            refs.append(f"{repo}/{chart}:{archive.removeprefix(f'{chart}-').removesuffix('.tgz')}")
        await helm.sync()
        return refs
