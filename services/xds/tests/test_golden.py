"""Golden translation tests: input YAML (a sample and the pods around it) -> expected Envoy resources as YAML.

Regenerate after an intended change with `TOLLGATE_UPDATE_GOLDEN=1 .venv/bin/pytest services/xds/tests/test_golden.py`
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.testing.requirements import nonempty
from tollgate.xds import ir, resources, translate
from tollgate.xds.resources import DNS
from tollgate.xds.world import World

GOLDEN = Path(__file__).parent / "golden"
SAMPLES = Path(__file__).parents[3] / "deploy" / "samples"
DNS_SERVERS = DNS.parse("127.0.0.53:5353")
UPDATE = os.environ.get("TOLLGATE_UPDATE_GOLDEN") == "1"


def load(path: Path, namespace: str = "default") -> list[dict[str, Any]]:
    objects = [obj for obj in yaml.safe_load_all(path.read_text()) if obj]
    for obj in objects:
        obj["metadata"].setdefault("namespace", namespace)
        obj["metadata"].setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        obj["metadata"].setdefault("generation", 1)
    return objects


def translate_objects(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    world = World()
    setters = {
        "VirtualService": world.set_virtual_service,
        "LoadBalancer": world.set_load_balancer,
        "RemoteEndpoint": world.set_remote_endpoint,
        "GWProxy": world.set_gw_proxy,
        "GWRoute": world.set_gw_route,
        "GWEndpointSlice": world.set_gw_endpoint_slice,
        "Pod": world.set_pod,
    }
    for obj in objects:
        setters[obj["kind"]](obj)
    envoy = next(o for o in objects if o["kind"] == "Pod" and ENVOY_PROXY_LABEL in o["metadata"]["labels"])
    meta = envoy["metadata"]
    proxy = ir.Proxy(
        node_id=f"{meta['name']}.{meta['namespace']}",
        namespace=meta["namespace"],
        pod=meta["name"],
        labels=ir.labels(meta["labels"]),
        listener_address="0.0.0.0",
    )
    sources = world.sources()
    assert not [e for s in sources for e in s.errors], "the sample does not translate cleanly"
    config = translate.proxy_config(proxy, sources)
    assert not config.conflicts
    return resources.dump(resources.proxy_resources(config, proxy.listener_address, DNS_SERVERS))


def check(name: str, actual: dict[str, list[dict[str, Any]]]) -> None:
    path = GOLDEN / f"{name}.envoy.yaml"
    if UPDATE:
        path.write_text(yaml.safe_dump(actual, sort_keys=False))
    assert path.exists(), f"no golden file {path}: run with TOLLGATE_UPDATE_GOLDEN=1"
    assert actual == yaml.safe_load(path.read_text()), f"{name}: translation differs from {path}"


VIRTUAL_SERVICE_SAMPLES = nonempty(
    sorted(SAMPLES.glob("*virtualservice*.yaml")), "deploy/samples/*virtualservice*.yaml"
)


def test_every_virtual_service_sample_has_a_golden_file() -> None:
    missing = [s.stem for s in VIRTUAL_SERVICE_SAMPLES if not (GOLDEN / f"{s.stem}.envoy.yaml").exists()]
    assert not missing, f"samples without golden output: {missing}"


@pytest.mark.parametrize("sample", VIRTUAL_SERVICE_SAMPLES, ids=lambda p: p.stem)
def test_virtual_service_sample(sample: Path) -> None:
    check(sample.stem, translate_objects(load(sample) + load(GOLDEN / "context.yaml")))


UDP_SESSION_CASES = nonempty(sorted(GOLDEN.glob("udp-sessions-*.input.yaml")), "golden/udp-sessions-*.input.yaml")


@pytest.mark.parametrize("case", UDP_SESSION_CASES, ids=lambda p: p.name.removesuffix(".input.yaml"))
def test_udp_session_limits(case: Path) -> None:
    check(case.name.removesuffix(".input.yaml"), translate_objects(load(case)))


def test_load_balancer_sample() -> None:
    objects = load(SAMPLES / "seed-loadbalancer.yaml") + load(GOLDEN / "loadbalancer.input.yaml")
    check("loadbalancer", translate_objects(objects))


LOAD_BALANCER_CASES = nonempty(sorted(GOLDEN.glob("loadbalancer-*.input.yaml")), "golden/loadbalancer-*.input.yaml")


@pytest.mark.parametrize("case", LOAD_BALANCER_CASES, ids=lambda p: p.name.removesuffix(".input.yaml"))
def test_load_balancer_ports(case: Path) -> None:
    check(case.name.removesuffix(".input.yaml"), translate_objects(load(case)))


def test_gateway_proxy_samples() -> None:
    samples = [SAMPLES / f"{kind}.yaml" for kind in ("gwproxy", "gwroute", "gwendpointslice")]
    objects = [obj for sample in samples for obj in load(sample)] + load(GOLDEN / "gwproxy.input.yaml")
    check("gwproxy", translate_objects(objects))


GATEWAY_PROXY_CASES = nonempty(sorted(GOLDEN.glob("gwproxy-*.input.yaml")), "golden/gwproxy-*.input.yaml")


@pytest.mark.parametrize("case", GATEWAY_PROXY_CASES, ids=lambda p: p.name.removesuffix(".input.yaml"))
def test_gateway_proxy_routes(case: Path) -> None:
    check(case.name.removesuffix(".input.yaml"), translate_objects(load(case)))
