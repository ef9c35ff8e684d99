"""The development files that cannot run on this machine (no Docker engine, Tilt not installable) still
parse and name every service, so they cannot silently fall behind the services."""

from __future__ import annotations

import ast
import re

from tollgate.testing.tools import repo_root

ROOT = repo_root()
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "pyproject.toml").exists())


def test_tiltfile_is_valid_starlark_syntax_and_lists_every_service() -> None:
    source = (ROOT / "Tiltfile").read_text()
    ast.parse(source)  # Starlark's syntax is a subset of Python's
    for service in SERVICES:
        assert f'"{service}": {{' in source, f"Tiltfile COMPONENTS lacks {service}"
        assert f'"{service}"' in source


def test_every_service_has_an_image_with_a_non_root_runtime_stage() -> None:
    for service in SERVICES:
        dockerfile = (ROOT / "services" / service / "Dockerfile").read_text()
        stages = re.findall(r"^FROM \S+ AS (\w+)$", dockerfile, re.MULTILINE)
        assert stages == ["build", "dev", "runtime"], f"{service}: stages {stages}"
        runtime = dockerfile.split("AS runtime", 1)[1]
        assert "USER 10001:10001" in runtime
        assert f'ENTRYPOINT ["python", "-m", "tollgate.{service}"]' in runtime
        assert "uv" not in runtime.replace("--user-group", ""), f"{service}: build tools in the final image"
        assert f"--package tollgate-{service}" in dockerfile


def test_every_service_has_a_chart() -> None:
    for service in SERVICES:
        chart = ROOT / "deploy" / "charts" / f"tollgate-{service}"
        assert (chart / "Chart.yaml").exists() and (chart / "values.schema.json").exists()
        assert (chart / "templates" / "NOTES.txt").exists()
