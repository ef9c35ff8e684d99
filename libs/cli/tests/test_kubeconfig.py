"""kubectl's kubeconfig lookup and merge, on files (the end-to-end tests connect with them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tollgate.cli.kubeconfig import KubeconfigError, chosen_context, kubeconfig_files, merge, read


def kubeconfig(path: Path, contexts: dict[str, str], current: str | None = None, ca: str = "ca.crt") -> Path:
    """A kubeconfig whose context NAME uses cluster CLUSTER (contexts NAME -> CLUSTER) at a server named after it."""
    clusters = sorted(set(contexts.values()))
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": f"https://{c}:6443", "certificate-authority": ca}}
                     for c in clusters],
        "contexts": [{"name": n, "context": {"cluster": c, "user": "me"}} for n, c in contexts.items()],
        "users": [{"name": "me", "user": {"token": path.name}}],
    }  # fmt: skip
    if current:
        body["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body))
    return path


def test_the_first_file_to_name_an_entry_or_set_current_context_wins_as_with_kubectl(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a" / "config", {"dev": "dev-cluster"})
    second = kubeconfig(tmp_path / "b" / "config", {"dev": "other", "prod": "prod-cluster"}, current="prod")
    third = kubeconfig(tmp_path / "c" / "config", {"test": "test-cluster"}, current="test")
    merged = merge([(p, read(p)) for p in (first, second, third)])
    assert [c["name"] for c in merged["contexts"]] == ["dev", "prod", "test"]
    assert merged["contexts"][0]["context"]["cluster"] == "dev-cluster"
    assert merged["current-context"] == "prod", "the first file that sets it (the Python client takes the last)"
    assert [u["user"]["token"] for u in merged["users"]] == ["config"]
    cas = {c["name"]: c["cluster"]["certificate-authority"] for c in merged["clusters"]}
    assert cas["dev-cluster"] == str(tmp_path / "a" / "ca.crt"), "relative to the file that named it"
    assert cas["prod-cluster"] == str(tmp_path / "b" / "ca.crt")


def test_kubeconfig_wins_over_the_environment_which_wins_over_home(tmp_path: Path) -> None:
    home_config = kubeconfig(tmp_path / "home" / ".kube" / "config", {"home": "h"}, current="home")
    listed = kubeconfig(tmp_path / "listed", {"listed": "l"})
    home = tmp_path / "home"
    explicit = kubeconfig(tmp_path / "explicit", {"x": "x"})
    environment = {"KUBECONFIG": f"{tmp_path / 'missing'}::{listed}:{home_config}"}
    assert kubeconfig_files(explicit, environment, home) == [explicit]
    assert kubeconfig_files(None, environment, home) == [listed, home_config]
    assert kubeconfig_files(None, {}, home) == [home_config]
    assert kubeconfig_files(None, {"KUBECONFIG": str(tmp_path / "missing")}, home) is None, "then in-cluster"
    assert kubeconfig_files(None, {}, tmp_path / "nobody") is None
    with pytest.raises(KubeconfigError, match=r"--kubeconfig .*missing: no such file"):
        kubeconfig_files(tmp_path / "missing", {}, home)


def test_an_unknown_or_absent_context_is_named_with_those_there_are(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {"dev": "d", "prod": "p"})
    merged = merge([(path, read(path))])
    assert chosen_context(merged, "prod", [path]) == "prod"
    with pytest.raises(KubeconfigError, match=r"--context staging: no such context in .* \(contexts: dev, prod\)"):
        chosen_context(merged, "staging", [path])
    with pytest.raises(KubeconfigError, match=r"no current-context in .*: pick one with --context"):
        chosen_context(merged, None, [path])
