"""Volumes: what each file of a Secret, ConfigMap, downward API or projected volume holds (pure), and writing
it the way the kubelet's AtomicWriter does, so that a process sees either the old or the new set of files.

    <volume>/..2026_01_01_00_00_00.123456/<files>    the current payload
    <volume>/..data -> ..2026_01_01_00_00_00.123456   swapped by one rename()
    <volume>/<top-level name> -> ..data/<top-level name>
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from tollgate.testing.pods import JSON, decoded, field_value

# (kind, name) of a Secret or ConfigMap of the pod's namespace -> the object, None when it does not exist.
Objects = Mapping[tuple[str, str], JSON | None]
DEFAULT_MODE = 0o644
TOKEN_EXPIRATION_SECONDS = 3600
DATA_DIR = "..data"


class VolumeError(ValueError):
    """A volume cannot be set up yet (the kubelet's FailedMount): a missing Secret, ConfigMap or key."""


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int
    owner: int | None = None  # None: root


@dataclass(frozen=True)
class TokenSource:
    """A serviceAccountToken projection: the TokenRequest it needs."""

    audience: str | None
    expiration_seconds: int


Payload = dict[str, File]


def token_sources(volume: JSON) -> list[TokenSource]:
    sources = (volume.get("projected") or {}).get("sources", [])
    return [
        TokenSource(token.get("audience"), token.get("expirationSeconds", TOKEN_EXPIRATION_SECONDS))
        for token in (source.get("serviceAccountToken") for source in sources)
        if token is not None
    ]


def references(volume: JSON) -> set[tuple[str, str]]:
    """The Secrets and ConfigMaps (kind, name) that the volume's content comes from."""
    found = set()
    for source in [volume, *(volume.get("projected") or {}).get("sources", [])]:
        if "secret" in source:
            found.add(("Secret", source["secret"].get("secretName") or source["secret"]["name"]))
        if "configMap" in source:
            found.add(("ConfigMap", source["configMap"]["name"]))
    return found


def _object_files(kind: str, name: str, source: JSON, objects: Objects, mode: int) -> Payload:
    obj = objects.get((kind, name))
    if obj is None:
        if source.get("optional"):
            return {}
        raise VolumeError(f'{kind.lower()} "{name}" not found')
    if kind == "Secret":
        data = {key: value.encode() for key, value in decoded(obj).items()}
    else:
        data = {key: value.encode() for key, value in (obj.get("data") or {}).items()}
        data |= {key: base64.b64decode(value) for key, value in (obj.get("binaryData") or {}).items()}
    items = source.get("items")
    if not items:
        return {key: File(value, mode) for key, value in data.items()}
    files = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise VolumeError(f'{kind.lower()} "{name}" has no key {item["key"]}')
        files[item["path"]] = File(data[item["key"]], item.get("mode", mode))
    return files


def _downward_files(pod: JSON, source: JSON, mode: int) -> Payload:
    files = {}
    for item in source.get("items", []):
        if "fieldRef" not in item:
            raise VolumeError(f"downwardAPI item {item['path']}: only fieldRef is supported by the embedded kubelet")
        value = field_value(pod, item["fieldRef"]["fieldPath"])
        if value is None:
            raise VolumeError(f"downwardAPI item {item['path']}: unsupported fieldPath {item['fieldRef']['fieldPath']}")
        files[item["path"]] = File(value.encode(), item.get("mode", mode))
    return files


def payload(
    volume: JSON,
    pod: JSON,
    objects: Objects,
    tokens: Mapping[TokenSource, str],
    fs_user: int | None = None,
    fs_group: int | None = None,
) -> Payload:
    """The files of a secret, configMap, downwardAPI or projected volume. A projected token is mode 0600 and
    owned by `fs_user` (the one runAsUser of every container, if any) when the pod has a user or an fsGroup,
    as the kubelet does so that the pod's non-root process can read it, and nobody else."""
    if "secret" in volume:
        source = volume["secret"]
        return _object_files("Secret", source["secretName"], source, objects, source.get("defaultMode", DEFAULT_MODE))
    if "configMap" in volume:
        source = volume["configMap"]
        return _object_files("ConfigMap", source["name"], source, objects, source.get("defaultMode", DEFAULT_MODE))
    if "downwardAPI" in volume:
        return _downward_files(pod, volume["downwardAPI"], volume["downwardAPI"].get("defaultMode", DEFAULT_MODE))
    projected = volume["projected"]
    mode = projected.get("defaultMode", DEFAULT_MODE)
    files: Payload = {}
    for source in projected.get("sources", []):
        if "secret" in source:
            files |= _object_files("Secret", source["secret"]["name"], source["secret"], objects, mode)
        elif "configMap" in source:
            files |= _object_files("ConfigMap", source["configMap"]["name"], source["configMap"], objects, mode)
        elif "downwardAPI" in source:
            files |= _downward_files(pod, source["downwardAPI"], mode)
        elif "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            key = TokenSource(token.get("audience"), token.get("expirationSeconds", TOKEN_EXPIRATION_SECONDS))
            private = fs_user is not None or fs_group is not None
            files[token["path"]] = File(tokens[key].encode(), 0o600 if private else mode, fs_user)
        else:
            raise VolumeError(f"projected source {sorted(source)} is not supported by the embedded kubelet")
    return files


def pod_fs_user(pod: JSON) -> int | None:
    """The runAsUser every container runs with, when there is exactly one (the kubelet's FsUserFrom)."""
    pod_user = (pod["spec"].get("securityContext") or {}).get("runAsUser")
    users = {(c.get("securityContext") or {}).get("runAsUser", pod_user) for c in pod["spec"]["containers"]}
    return users.pop() if len(users) == 1 else None


def write_atomic(directory: Path, files: Payload, fs_group: int | None) -> None:
    """Make `directory` hold exactly `files` in one step (see the module's docstring). With `fs_group`, files
    belong to that group and are group-readable, as the kubelet's SetVolumeOwnership makes them."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    version = directory / stamp
    version.mkdir(mode=0o755)
    for relative, file in files.items():
        path = version / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.data)
        mode = file.mode
        if fs_group is not None:
            os.chown(path, file.owner if file.owner is not None else 0, fs_group)
            mode |= 0o440
        elif file.owner is not None:
            os.chown(path, file.owner, -1)
        path.chmod(mode)
    data = directory / DATA_DIR
    previous = os.readlink(data) if data.is_symlink() else None
    staging = directory / f"{DATA_DIR}_tmp"
    staging.unlink(missing_ok=True)
    staging.symlink_to(stamp)
    staging.rename(data)
    top_level = {PurePosixPath(relative).parts[0] for relative in files}
    for name in top_level:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"{DATA_DIR}/{name}")
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in top_level:
            entry.unlink()
    if previous is not None:
        shutil.rmtree(directory / previous, ignore_errors=True)
