"""Images: a service's "image config" read from its Dockerfile, in this checkout's venv."""

from __future__ import annotations

import pytest

from tollgate.testing.kubelet.image import DEFAULT_PATH, ImageConfig, ImageError, load_images, parse_dockerfile, resolve
from tollgate.testing.tools import repo_root

VENV = "/checkout/.venv"


def test_each_service_runs_its_entrypoint_from_the_checkouts_venv_as_the_images_user() -> None:
    images = load_images(repo_root(), VENV)
    assert set(images) == {"allocator", "jobs", "routedip", "webhook", "xds"}
    jobs = images["jobs"]
    assert jobs.entrypoint == ("python", "-m", "tollgate.jobs")  # the last stage, not the dev stage's watchfiles
    assert dict(jobs.env) == {"PATH": f"{VENV}/bin:{DEFAULT_PATH}", "PYTHONUNBUFFERED": "1"}
    assert (jobs.user, jobs.group, jobs.workdir) == (10001, 10001, "/")


def test_stages_inherit_and_entrypoint_drops_an_inherited_cmd() -> None:
    dockerfile = """
    # syntax=docker/dockerfile:1
    FROM debian AS base
    ENV A=1 \\
        B="two words"
    CMD ["serve"]
    WORKDIR /srv
    FROM base AS app
    ENV C=${A}-$B
    ENTRYPOINT /app/venv/bin/app --flag
    WORKDIR data
    USER 42
    """
    config = parse_dockerfile(dockerfile, VENV)
    assert config.entrypoint == ("/bin/sh", "-c", f"{VENV}/bin/app --flag")
    assert config.cmd == ()
    assert dict(config.env) == {"PATH": DEFAULT_PATH, "A": "1", "B": "two words", "C": "1-two words"}
    assert (config.workdir, config.user, config.group) == ("/srv/data", 42, None)
    assert parse_dockerfile('FROM x\nCMD ["a"]\nENTRYPOINT ["e"]\n', VENV).cmd == ("a",)  # same stage: kept


def test_an_image_resolves_to_its_service_whatever_the_tag() -> None:
    images = {"jobs": ImageConfig(entrypoint=("jobs",))}
    for image in ("ghcr.io/tollgate/jobs:0.1.0", "ghcr.io/tollgate/jobs", "ghcr.io/tollgate/jobs:dev@sha256:ab"):
        assert resolve(image, "ghcr.io/tollgate/", images).entrypoint == ("jobs",)
    with pytest.raises(ImageError, match=r"no services/nginx/Dockerfile in this checkout \(services: jobs\)"):
        resolve("ghcr.io/tollgate/nginx:1", "ghcr.io/tollgate/", images)
    with pytest.raises(ImageError, match=r"is not under 'ghcr\.io/tollgate/'"):
        resolve("docker.io/library/busybox", "ghcr.io/tollgate/", images)
