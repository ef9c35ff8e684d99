"""The development files: the local system's one description (deploy/local/resources.yaml) and the images,
which cannot be built on this machine (no Docker engine). The Tiltfile is tested by running Tilt
(tests/e2e/test_tilt.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tollgate.testing import node
from tollgate.testing.cluster import endpoint_policy_env
from tollgate.testing.dev import DevSystem
from tollgate.testing.requirements import nonempty
from tollgate.testing.tools import repo_root

ROOT = repo_root()
SERVICES = nonempty(
    sorted(p.name for p in (ROOT / "services").iterdir() if (p / "pyproject.toml").exists()),
    "services/*/pyproject.toml",
)


def test_local_resources_start_in_an_order_that_respects_after_and_name_real_steps(tmp_path: Path) -> None:
    system = DevSystem(ROOT, state=tmp_path)
    started: set[str] = set()
    for resource in system.resources:
        assert (resource.step is None) != (resource.module is None), f"{resource.name}: a step or a module"
        assert set(resource.after) <= started, f"{resource.name} starts before {set(resource.after) - started}"
        if resource.step is not None:
            assert resource.step in system.steps, f"{resource.name}: no step {resource.step}"
        started.add(resource.name)
    services = {r.name for r in system.resources if r.module is not None and r.module.startswith("tollgate.")}
    assert {f"tollgate.{s}" for s in SERVICES} <= {r.module for r in system.resources}
    health = [r.health for r in system.resources if r.module is not None]
    assert len(health) == len(set(health)) == len(services), "health ports must be distinct"


def test_the_local_system_runs_the_real_node_endpoint_policy_and_envoys_reach_xds_at_the_pod_gateway(
    tmp_path: Path,
) -> None:
    """make dev and Tilt's local mode read resources.yaml, which must say what tollgate.testing says of the real
    node: its endpoint policy, and where its pods reach a process of this machine."""
    resources = {r.name: r for r in DevSystem(ROOT, state=tmp_path).resources}
    for service in ("webhook", "allocator", "xds"):
        policy = endpoint_policy_env(service, real_node=True)
        assert {key: resources[service].env.get(key) for key in policy} == policy
    assert resources["xds"].env["TOLLGATE_XDS_GRPC_HOST"] == node.POD_GATEWAY
    assert resources["allocator"].env["TOLLGATE_ALLOCATOR_XDS_ADDRESS"] == f"{node.POD_GATEWAY}:18000"
    assert resources["xds"].endpoints["ads"] == f"{node.POD_GATEWAY}:18000"


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
