"""Images: `<prefix><service>:<tag>` is services/<service>/ of this checkout, its "image config" read from the
last stage of services/<service>/Dockerfile (ENTRYPOINT, CMD, ENV, USER, WORKDIR), where the image's venv
(/app/venv) is this checkout's venv. Pure, apart from load_images."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

# Where hack/Dockerfile.in puts the venv (UV_PROJECT_ENVIRONMENT) that the image's PATH and ENTRYPOINT use.
IMAGE_VENV = "/app/venv"
# A base image's PATH when the Dockerfile does not say (Docker's default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class ImageError(LookupError):
    """The image is not one of this checkout's services (the kubelet reports ErrImagePull)."""


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = (("PATH", DEFAULT_PATH),)
    user: int | None = None
    group: int | None = None
    workdir: str = "/"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments and parser directives dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    pairs = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def _command(arguments: str) -> tuple[str, ...]:
    """Exec form (a JSON array) as is; shell form through /bin/sh -c, as Docker runs it."""
    if arguments.startswith("["):
        return tuple(json.loads(arguments))
    return ("/bin/sh", "-c", arguments)


def _env(arguments: str, env: dict[str, str]) -> None:
    words = shlex.split(arguments)
    pairs = [word.partition("=")[::2] for word in words] if "=" in words[0] else [(words[0], " ".join(words[1:]))]
    for key, value in pairs:
        env[key] = _ENV_REF.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


def parse_dockerfile(text: str, venv: str) -> ImageConfig:
    """The config of the Dockerfile's last stage; a stage built FROM an earlier one inherits its config."""
    stages: dict[str, ImageConfig] = {}
    config, stage, cmd_set = ImageConfig(), None, False
    env = dict(config.env)
    for instruction, arguments in _instructions(text):
        if instruction == "FROM":
            words = arguments.split()
            config, cmd_set = stages.get(words[0], ImageConfig()), False
            env = dict(config.env)
            stage = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
        elif instruction == "ENTRYPOINT":
            # An ENTRYPOINT drops the CMD inherited from the base, not one set earlier in the same stage.
            config = replace(config, entrypoint=_command(arguments), cmd=config.cmd if cmd_set else ())
        elif instruction == "CMD":
            config, cmd_set = replace(config, cmd=_command(arguments)), True
        elif instruction == "ENV":
            _env(arguments, env)
            config = replace(config, env=tuple(env.items()))
        elif instruction == "USER":
            user, _, group = arguments.partition(":")
            config = replace(config, user=int(user) if user.isdigit() else None, group=int(group) if group else None)
        elif instruction == "WORKDIR":
            config = replace(config, workdir=str(Path(config.workdir) / arguments))
        if stage is not None:
            stages[stage] = config
    return _in_checkout(config, venv)


def _in_checkout(config: ImageConfig, venv: str) -> ImageConfig:
    def local(text: str) -> str:
        return text.replace(IMAGE_VENV, venv)

    return replace(
        config,
        entrypoint=tuple(map(local, config.entrypoint)),
        cmd=tuple(map(local, config.cmd)),
        env=tuple((key, local(value)) for key, value in config.env),
        workdir=local(config.workdir),
    )


def resolve(image: str, prefix: str, images: Mapping[str, ImageConfig]) -> ImageConfig:
    """The config of `image` (`<prefix><service>[:tag][@digest]`; any tag is this checkout)."""
    if not image.startswith(prefix):
        raise ImageError(f"image {image!r} is not under {prefix!r}: only this checkout's services run here")
    name = image.removeprefix(prefix).split("@", 1)[0].split(":", 1)[0]
    if name not in images:
        known = ", ".join(sorted(images)) or "none"
        raise ImageError(f"image {image!r}: no services/{name}/Dockerfile in this checkout (services: {known})")
    return images[name]


def load_images(root: Path, venv: str) -> dict[str, ImageConfig]:
    """The config of every services/<name>/Dockerfile of the checkout at `root`."""
    return {
        dockerfile.parent.name: parse_dockerfile(dockerfile.read_text(), venv)
        for dockerfile in sorted(root.glob("services/*/Dockerfile"))
    }
