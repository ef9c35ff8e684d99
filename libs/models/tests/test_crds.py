"""The generated CRDs: in sync with the models, structural, and expressing what a schema can."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tollgate.models import ALL_KINDS, VirtualService
from tollgate.models.__main__ import main as manifests
from tollgate.models.crd import definition, openapi_schema

ROOT = Path(__file__).resolve().parents[3]
SEED_VS = yaml.safe_load((ROOT / "deploy/samples/seed-virtualservice.yaml").read_text())


def test_crds_directory_matches_the_models() -> None:
    assert manifests([str(ROOT / "crds"), "--check"]) == 0, "crds/ drifted from the models: run `make manifests`"


def test_manifests_is_idempotent(tmp_path: Path) -> None:
    assert manifests([str(tmp_path)]) == 0
    first = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert manifests([str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == first
    assert manifests([str(tmp_path), "--check"]) == 0


def test_check_reports_a_hand_edit(tmp_path: Path) -> None:
    manifests([str(tmp_path)])
    victim = next(tmp_path.iterdir())
    victim.write_text(victim.read_text() + "# edited\n")
    assert manifests([str(tmp_path), "--check"]) == 1


def walk(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(walk(value))
    return found


@pytest.mark.parametrize("model", ALL_KINDS, ids=[m.resource.kind for m in ALL_KINDS])
def test_schema_is_structural(model: Any) -> None:
    crd = definition(model)
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert crd["spec"]["names"]["shortNames"], "every kind has a short name"
    assert any(c["name"] == "Age" for c in version["additionalPrinterColumns"])
    for node in walk(version["schema"]["openAPIV3Schema"]):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node
        if "properties" in node:
            assert node.get("type") == "object" and "additionalProperties" not in node


def rejects(document: dict[str, Any]) -> str:
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(document, openapi_schema(VirtualService), format_checker=jsonschema.FormatChecker())
    return str(caught.value.message)


def test_schema_rejects_a_short_health_check_interval() -> None:
    bad = copy.deepcopy(SEED_VS)
    bad["spec"]["listeners"][0]["udp"]["cluster"]["health_check"]["interval"] = 100
    assert "100 is less than the minimum of 500" in rejects(bad)


def test_schema_requires_exactly_one_host_kind() -> None:
    bad = copy.deepcopy(SEED_VS)
    bad["spec"]["listeners"][0]["udp"]["cluster"]["endpoints"][0]["host"]["address"] = "10.0.0.1"
    assert "valid under each of" in rejects(bad)


def test_schema_rejects_an_unknown_service_discovery() -> None:
    bad = copy.deepcopy(SEED_VS)
    bad["spec"]["listeners"][0]["udp"]["cluster"]["service_discovery"] = "dns"
    assert "'dns' is not one of ['strictdns', 'eds']" in rejects(bad)


def test_schema_bounds_udp_sessions() -> None:
    bad = copy.deepcopy(SEED_VS)
    bad["spec"]["listeners"][0]["udp"]["idle_timeout"] = 10
    assert "10 is less than the minimum of 1000" in rejects(bad)
    bad["spec"]["listeners"][0]["udp"].update(idle_timeout=60000, max_sessions=0)
    assert "0 is less than the minimum of 1" in rejects(bad)
