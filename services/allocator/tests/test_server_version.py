"""The allocator refuses to run against an API server too old to serve the CRDs' selectable fields."""

from __future__ import annotations

import pytest

from tollgate.allocator.k8s import UnsupportedKubernetes, require_supported


@pytest.mark.parametrize(("major", "minor"), [("1", "31"), ("1", "36"), ("1", "32+"), ("2", "0"), ("1", "dev")])
def test_kubernetes_1_31_and_later_are_supported(major: str, minor: str) -> None:
    require_supported(major, minor)


@pytest.mark.parametrize(("major", "minor"), [("1", "30"), ("1", "29+"), ("1", "8")])
def test_an_older_api_server_is_refused_naming_both_versions_and_why(major: str, minor: str) -> None:
    with pytest.raises(UnsupportedKubernetes) as refused:
        require_supported(major, minor)
    message = str(refused.value)
    assert f"needs Kubernetes 1.31 or later, and the API server is {major}.{minor}" in message
    assert "selectableFields" in message
