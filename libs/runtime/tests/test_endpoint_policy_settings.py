"""The endpoint policy settings the webhook, the allocator and xds share."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from tollgate.runtime.settings import EndpointPolicySettings, ServiceSettings


class Settings(ServiceSettings, EndpointPolicySettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_EXAMPLE_", extra="ignore")


def test_the_defaults_deny_the_usual_cluster_ranges_and_allow_no_exception() -> None:
    policy = Settings().endpoint_policy()
    assert [str(r) for r in policy.denied] == ["10.96.0.0/12", "10.244.0.0/16"]
    assert policy.allowed == ()


def test_the_service_prefix_names_its_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOLLGATE_EXAMPLE_ENDPOINT_DENIED_RANGES", "127.1.0.0/16, 127.2.0.0/16")
    monkeypatch.setenv("TOLLGATE_EXAMPLE_ENDPOINT_ALLOWED_RANGES", "127.77.0.0/16")
    policy = Settings().endpoint_policy()
    assert policy.refusal("spec.address", "127.77.0.1") is None
    assert "127.1.0.0/16, a denied range" in str(policy.refusal("spec.address", "127.1.3.4"))


def test_a_bad_range_is_refused_at_start_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOLLGATE_EXAMPLE_ENDPOINT_ALLOWED_RANGES", "127.77.0.1/16")
    with pytest.raises(ValidationError, match=r"endpoint_allowed_ranges: '127\.77\.0\.1/16' is not a CIDR range"):
        Settings()
