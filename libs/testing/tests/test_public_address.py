"""The node's public-address CNI plugin, as containerd calls it: CNI_COMMAND, configuration on stdin, JSON out."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tollgate.testing import public_address


def call(command: str, stdin: str = "{}", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tollgate.testing.public_address"],
        input=stdin,
        env={"CNI_COMMAND": command, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_version_names_the_cni_versions_it_speaks() -> None:
    result = call("VERSION")
    assert result.returncode == 0
    assert "1.0.0" in json.loads(result.stdout)["supportedVersions"]


def test_an_unknown_command_is_a_cni_error_on_stdout() -> None:
    result = call("FROB")
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 4 and "FROB" in error["msg"]


def test_cni_args_are_parsed_as_containerd_passes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=epic-root;K8S_POD_NAME=lb-envoy-abc")
    assert public_address.cni_args()["K8S_POD_NAME"] == "lb-envoy-abc"
    assert public_address.cni_args()["K8S_POD_NAMESPACE"] == "epic-root"


def test_the_pods_ipv4_address_comes_from_the_bridge_plugins_result() -> None:
    result = {"ips": [{"address": "fd00::5/64"}, {"address": "198.18.0.7/24", "gateway": "198.18.0.1"}]}
    assert public_address.pod_ipv4(result) == "198.18.0.7"
    with pytest.raises(public_address.PluginError, match="no IPv4 address"):
        public_address.pod_ipv4({"ips": []})
