"""Every sample (the seeds' examples among them) validates against the models and the generated CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tollgate.models import ALL_KINDS, kind_for, parse
from tollgate.models.crd import openapi_schema
from tollgate.testing.compare import assert_contains
from tollgate.testing.requirements import nonempty

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = sorted((ROOT / "deploy" / "samples").glob("*.yaml"))
TOLLGATE_GROUPS = {model.resource.group for model in ALL_KINDS}


def tollgate_documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in SAMPLES:
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            if document and document["apiVersion"].split("/")[0] in TOLLGATE_GROUPS:
                documents.append((f"{path.name}#{index}", document))
    return documents


DOCUMENTS = nonempty(tollgate_documents(), "documents of tollgate's kinds in deploy/samples/*.yaml")


def test_every_kind_has_a_sample() -> None:
    kinds = {document["kind"] for _, document in DOCUMENTS}
    assert kinds == {model.resource.kind for model in ALL_KINDS}


@pytest.mark.parametrize(("where", "document"), DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_sample_round_trips_through_the_model(where: str, document: dict[str, Any]) -> None:
    model = parse(document)
    assert_contains(document, model.to_wire())
    again = type(model).model_validate(model.to_wire())
    assert again == model


@pytest.mark.parametrize(("where", "document"), DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_sample_validates_against_the_crd_schema(where: str, document: dict[str, Any]) -> None:
    schema = openapi_schema(kind_for(document["apiVersion"], document["kind"]))
    jsonschema.validate(document, schema, format_checker=jsonschema.FormatChecker())


def test_seed_examples_are_in_the_samples() -> None:
    names = {(document["kind"], document["metadata"]["name"]) for _, document in DOCUMENTS}
    assert {
        ("EPIC", "epic"),
        ("LoadBalancer", "sample-acnodal"),
        ("VirtualService", "ingress-callid"),
    } <= names
    assert {("Account", "root"), ("LBServiceGroup", "sample")} <= names
