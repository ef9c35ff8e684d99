"""The webhook configurations and the CLI that prints them and writes development certificates."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tollgate.models import ALL_KINDS, EPIC
from tollgate.webhook.cli import main
from tollgate.webhook.registration import Registration, ServiceReference


def test_every_kind_is_registered_for_defaulting_and_validation() -> None:
    registration = Registration(ca_bundle=b"PEM", url="https://127.0.0.1:9443/")
    mutating, validating = registration.configurations()
    assert (mutating["kind"], validating["kind"]) == ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    for configuration, operation in ((mutating, "mutate"), (validating, "validate")):
        hooks = configuration["webhooks"]
        assert len(hooks) == len(ALL_KINDS)
        for hook, model in zip(hooks, ALL_KINDS, strict=True):
            info = model.resource
            guarded = operation == "validate" and model is EPIC  # the singleton may not go while it is in use
            assert hook["rules"] == [
                {
                    "apiGroups": [info.group],
                    "apiVersions": [info.version],
                    "operations": ["CREATE", "UPDATE", "DELETE"] if guarded else ["CREATE", "UPDATE"],
                    "resources": [info.plural],
                    "scope": info.scope,
                }
            ]
            assert hook["clientConfig"] == {
                "caBundle": base64.b64encode(b"PEM").decode(),
                "url": f"https://127.0.0.1:9443/{operation}/{info.group}/{info.version}/{info.plural}",
            }
            assert (hook["sideEffects"], hook["failurePolicy"], hook["timeoutSeconds"]) == ("None", "Fail", 5)
            assert hook["admissionReviewVersions"] == ["v1"]


def test_a_service_reference_and_selectors() -> None:
    registration = Registration(
        ca_bundle=b"PEM",
        service=ServiceReference("tollgate-system", "tollgate-webhook"),
        object_selector={"matchLabels": {"a": "b"}},
    )
    hook = registration.validating()["webhooks"][0]
    assert hook["clientConfig"]["service"] == {
        "namespace": "tollgate-system",
        "name": "tollgate-webhook",
        "port": 443,
        "path": "/validate/epic.acnodal.io/v1/epics",
    }
    assert hook["objectSelector"] == {"matchLabels": {"a": "b"}}


@pytest.mark.parametrize(
    "arguments",
    [{}, {"url": "https://x", "service": ServiceReference("a", "b")}, {"url": "https://x", "timeout_seconds": 31}],
)
def test_a_registration_needs_one_destination_and_a_timeout_the_api_server_accepts(
    arguments: dict[str, object],
) -> None:
    with pytest.raises(ValueError, match=r"url and service|timeout_seconds"):
        Registration(ca_bundle=b"PEM", **arguments)  # type: ignore[arg-type]


def test_the_cli_writes_certificates_and_prints_configurations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "--dir", str(tmp_path), "--host", "127.0.0.1", "--host", "webhook.tollgate-system.svc"]) == 0
    certificate = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["webhook.tollgate-system.svc"]
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    first = (tmp_path / "tls.crt").read_bytes()
    main(["certs", "--dir", str(tmp_path), "--host", "127.0.0.1"])
    assert (tmp_path / "tls.crt").read_bytes() == first, "an existing pair is kept unless --force"
    capsys.readouterr()
    ca_file = str(tmp_path / "ca.crt")
    assert main(["configurations", "--service", "ns/svc:8443", "--ca-file", ca_file, "--object-selector", "a=b"]) == 0
    mutating, validating = yaml.safe_load_all(capsys.readouterr().out)
    assert mutating["webhooks"][0]["clientConfig"]["service"]["port"] == 8443
    assert base64.b64decode(validating["webhooks"][0]["clientConfig"]["caBundle"]) == (tmp_path / "ca.crt").read_bytes()
    assert validating["webhooks"][0]["objectSelector"] == {"matchLabels": {"a": "b"}}


def test_the_cli_runs_as_a_module_and_refuses_a_bad_service_reference() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tollgate.webhook.cli", "configurations", "--service", "nonamespace", "--ca-file", "x"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "'nonamespace': expected namespace/name[:port]" in result.stderr
