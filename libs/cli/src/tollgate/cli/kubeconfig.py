"""Which cluster a command line talks to, found the way kubectl finds it.

1. `--kubeconfig FILE`: that file alone (it must exist);
2. else `$KUBECONFIG`: a list of files separated by `:` (`;` on Windows), those that exist merged as kubectl merges
   them: the first file to name a cluster, context or user wins it, the first file to set `current-context` sets it,
   and a relative path in a file is relative to that file's directory;
3. else `~/.kube/config`, when it exists;
4. else the pod's service account (in-cluster), when `KUBERNETES_SERVICE_HOST` is set.

`--context` picks a context of the merged configuration instead of its `current-context`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from tollgate.runtime.kube import client_for

JSON = dict[str, Any]
NAMED_LISTS = ("clusters", "contexts", "users")
# Fields that hold a file path, per list entry kind (kubectl resolves them against the defining file's directory).
PATH_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


class KubeconfigError(Exception):
    """No usable configuration: a missing or unreadable file, an unknown context, nowhere to look."""


def kubeconfig_files(explicit: Path | None, environ: Mapping[str, str], home: Path) -> list[Path] | None:
    """The files to merge, in order; None when there are none to read and the in-cluster account is next."""
    if explicit is not None:
        if not explicit.is_file():
            raise KubeconfigError(f"--kubeconfig {explicit}: no such file")
        return [explicit]
    listed = environ.get("KUBECONFIG")
    if listed:
        found = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        return [p for p in found if p.is_file()] or None
    default = home / ".kube" / "config"
    return [default] if default.is_file() else None


def _absolute_paths(entry: JSON, kind: str, base: Path) -> JSON:
    if kind not in PATH_FIELDS:
        return entry
    key, fields = PATH_FIELDS[kind]
    body = entry.get(key)
    if not isinstance(body, dict):
        return entry
    resolved = {f: str(base / body[f]) for f in fields if isinstance(body.get(f), str) and body[f]}
    return {**entry, key: {**body, **resolved}}


def merge(configs: Sequence[tuple[Path, JSON]]) -> JSON:
    """kubectl's merge of kubeconfig files, in order (see the module's docstring)."""
    merged: JSON = {"apiVersion": "v1", "kind": "Config", **{kind: [] for kind in NAMED_LISTS}}
    for path, loaded in configs:
        for kind in NAMED_LISTS:
            known = {entry["name"] for entry in merged[kind]}
            for entry in loaded.get(kind) or []:
                if isinstance(entry, dict) and entry.get("name") not in known:
                    merged[kind].append(_absolute_paths(copy.deepcopy(entry), kind, path.parent))
                    known.add(entry["name"])
        if loaded.get("current-context") and not merged.get("current-context"):
            merged["current-context"] = loaded["current-context"]
    return merged


def read(path: Path) -> JSON:
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise KubeconfigError(f"kubeconfig {path}: {str(error).splitlines()[0]}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a mapping")
    return loaded


def chosen_context(merged: JSON, context: str | None, files: Sequence[Path]) -> str:
    """The context to use: `context` when given, else the merged `current-context`; it must exist."""
    names = [entry["name"] for entry in merged["contexts"]]
    where = ", ".join(str(f) for f in files)
    available = f"(contexts: {', '.join(names)})" if names else "(it has no contexts)"
    name = context or merged.get("current-context")
    if not name:
        raise KubeconfigError(f"no current-context in {where}: pick one with --context {available}")
    if name not in names:
        flag = "--context" if context else "current-context"
        raise KubeconfigError(f"{flag} {name}: no such context in {where} {available}")
    return str(name)


def load(
    kubeconfig: Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> client.ApiClient:
    """An ApiClient for the cluster kubectl would talk to with the same flags and environment."""
    environ = os.environ if environ is None else environ
    files = kubeconfig_files(kubeconfig, environ, Path.home() if home is None else home)
    configuration = client.Configuration()
    if files is None:
        if context:
            raise KubeconfigError(f"--context {context}: no kubeconfig to choose it from")
        if not environ.get("KUBERNETES_SERVICE_HOST"):
            looked = (
                f"none of KUBECONFIG's files ({environ['KUBECONFIG']}) exists"
                if environ.get("KUBECONFIG")
                else ("no --kubeconfig, no KUBECONFIG, no ~/.kube/config")
            )
            raise KubeconfigError(f"no configuration: {looked}, and not running in a pod")
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as error:
            raise KubeconfigError(f"in-cluster configuration: {error}") from None
        return client_for(configuration)
    merged = merge([(f, read(f)) for f in files])
    name = chosen_context(merged, context, files)
    try:
        config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
            merged, context=name, client_configuration=configuration, persist_config=False
        )
    except (config.ConfigException, OSError, ValueError) as error:
        raise KubeconfigError(f"context {name}: {error}") from None
    return client_for(configuration)
