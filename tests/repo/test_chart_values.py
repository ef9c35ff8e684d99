"""Each chart's values are declared once (hack/chart_values.py): its values.yaml must match its model, and the
values.schema.json generated from the model accepts the chart's defaults and refuses a misspelt key or a bad enum."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tollgate.models.addresses import DEFAULT_DENIED_RANGES
from tollgate.testing.requirements import nonempty
from tollgate.testing.tools import hack_script, repo_root

ROOT = repo_root()
CHARTS = ROOT / "deploy" / "charts"
CHART_NAMES = nonempty(
    sorted(p.parent.name for p in CHARTS.glob("tollgate-*/values.yaml")), "deploy/charts/tollgate-*/values.yaml"
)

ENDPOINT_POLICY_CHARTS = ("tollgate-webhook", "tollgate-allocator", "tollgate-xds")


def defaults(chart: str) -> dict[str, Any]:
    values = yaml.safe_load((CHARTS / chart / "values.yaml").read_text())
    assert isinstance(values, dict)
    return values


def test_every_chart_has_a_model() -> None:
    assert sorted(hack_script("chart_values").CHARTS) == CHART_NAMES


def test_a_value_missing_from_the_model_fails_the_check_naming_the_chart_and_the_key(tmp_path: Path) -> None:
    module = hack_script("chart_values")
    charts = tmp_path / "deploy" / "charts"
    for chart in CHART_NAMES:
        (charts / chart).mkdir(parents=True)
        shutil.copy(CHARTS / chart / "values.yaml", charts / chart / "values.yaml")
    assert module.check_charts(charts) == []

    values = defaults("tollgate-allocator")
    values["drainTimeout"] = "30s"
    values["metrics"]["envoyPodMonitor"]["scrapeTimeout"] = "10s"
    (charts / "tollgate-allocator" / "values.yaml").write_text(yaml.safe_dump(values))
    assert sorted(module.check_charts(charts)) == [
        "deploy/charts/tollgate-allocator/values.yaml: drainTimeout: Extra inputs are not permitted; "
        "declare it in hack/chart_values.py",
        "deploy/charts/tollgate-allocator/values.yaml: metrics.envoyPodMonitor.scrapeTimeout: Extra inputs are not "
        "permitted; declare it in hack/chart_values.py",
    ]


def test_a_value_of_another_chart_is_not_in_this_ones_model() -> None:
    values = {**defaults("tollgate-jobs"), "debugApi": {"port": 8081}}
    assert hack_script("chart_values").values_errors("tollgate-jobs", values) == [
        "deploy/charts/tollgate-jobs/values.yaml: debugApi: Extra inputs are not permitted; "
        "declare it in hack/chart_values.py",
    ]


def test_a_bad_default_fails_the_check_naming_the_key_and_the_rule() -> None:
    values = defaults("tollgate-xds")
    values["debugApi"]["port"] = 70000
    [error] = hack_script("chart_values").values_errors("tollgate-xds", values)
    assert error.startswith("deploy/charts/tollgate-xds/values.yaml: debugApi.port: Input should be less than or equal")


@pytest.mark.parametrize("chart", CHART_NAMES)
def test_the_generated_schema_accepts_the_defaults_and_refuses_a_typo_and_a_bad_enum(chart: str) -> None:
    module = hack_script("chart_values")
    schema = module.json_schema(module.CHARTS[chart])
    assert schema["$schema"] == "https://json-schema.org/draft-07/schema#"
    assert "$defs" not in schema
    assert "title" not in set(_keys(schema))
    validator = jsonschema.Draft7Validator(schema)
    values = defaults(chart)
    assert list(validator.iter_errors(values)) == []

    [typo] = validator.iter_errors({**values, "kep" if chart == "tollgate-crds" else "logLevle": "INFO"})
    assert typo.validator == "additionalProperties"
    assert "logLevle" in typo.message or "kep" in typo.message
    if chart == "tollgate-crds":
        [bad] = validator.iter_errors({"keep": "yes"})
        assert list(bad.absolute_path) == ["keep"]
        return
    [bad] = validator.iter_errors({**values, "image": {**values["image"], "pullPolicy": "Sometimes"}})
    assert list(bad.absolute_path) == ["image", "pullPolicy"]
    assert bad.validator == "enum"


def test_the_charts_that_judge_endpoints_have_one_endpoint_policy_the_services_default() -> None:
    """The webhook refuses at admission what the allocator and xds would refuse later: one policy for all three."""
    policies = {chart: defaults(chart)["endpointPolicy"] for chart in ENDPOINT_POLICY_CHARTS}
    assert all(
        policy == {"deniedRanges": list(DEFAULT_DENIED_RANGES), "allowedRanges": []} for policy in policies.values()
    ), policies


def _keys(node: Any) -> Any:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties":
                for schema in value.values():
                    yield from _keys(schema)
            else:
                yield key
                yield from _keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from _keys(item)
