"""Admission latency the API server adds with the webhook: create round trips with and without it.

Each phase creates objects through the API server and records every request's round trip, in three modes
that alternate in rounds within one run, so a change in the machine's load falls on all of them alike:

- baseline: no webhook configuration;
- floor: the cheapest webhook there can be (bench/floor, Go, allows everything after reading the uid),
  registered exactly as tollgate's is (one mutating and one validating call per create): what any webhook
  costs the API server;
- tollgate: the webhook service, defaulting and validating.

Three loads: 1 client; 50 clients in a closed loop (each sends its next create as soon as the last returns,
which saturates the two cores the API server, etcd, the webhook and the clients share); 50 clients paced
to a fixed total rate below saturation (`--paced-rate`). Besides p50/p99, each row shows the CPU a create
costs the API server and the webhook process (from /proc), and the mean webhook call as the API server
times it (its apiserver_admission_webhook_admission_duration_seconds).

    .venv/bin/python -m bench.webhook                  # its own embedded cluster (about 7 s to start)
    .venv/bin/python -m bench.webhook --kubeconfig .dev/kubeconfig --requests 3000
    .venv/bin/python -m bench.webhook --quick --json .dev/bench/webhook.json   # CI smoke, the targets as JSON
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
from kubernetes import client, config

from bench import gobuild, report
from bench.measure import cpu_seconds, percentile
from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.net import free_ports
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for
from tollgate.webhook.certs import generate
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

LABEL = "webhook.tollgate.io/bench"
FLOOR_DRY_RUN_REFUSAL = "the floor webhook refuses dry runs"  # bench/floor/main.go
Obj = dict[str, Any]
Mode = Literal["baseline", "floor", "tollgate"]
MODES: tuple[Mode, ...] = ("baseline", "floor", "tollgate")
LOADS = ("1", "50", "paced")  # 1 client; 50 in a closed loop; 50 paced to --paced-rate


@dataclass(frozen=True)
class Load:
    clients: int
    rate: float | None = None  # creates per second across all clients; None: closed loop

    def describe(self) -> str:
        return f"{self.clients}" + (f" paced, {self.rate:g}/s" if self.rate else "")


@dataclass
class Sample:
    """One mode under one load, summed over its rounds."""

    latencies: list[float] = field(default_factory=list)
    creates: int = 0
    apiserver_cpu: float = 0.0
    webhook_cpu: float = 0.0
    webhook_calls: float = 0.0
    webhook_call_seconds: float = 0.0


def goop(namespace: str, name: str, label: str) -> Obj:
    return {
        "apiVersion": "goop.example.com/v1alpha1",
        "kind": "Goop",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: label}},
        "spec": {"cmd": "echo hello", "jobCount": 3},
    }


def virtual_service(namespace: str, name: str, label: str) -> Obj:
    """Names and selector unique to the object, so each one passes the cross-object checks."""
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: label}},
        "spec": {
            "selector": {"app": name},
            "listeners": [
                {
                    "name": f"{name}-l",
                    "udp": {
                        "port": 2001,
                        "cluster": {
                            "name": f"{name}-c",
                            "health_check": {"interval": 500},
                            "hash_key": "callid",
                            "endpoints": [{"name": f"{name}-e", "host": {"selector": {"app": "w"}}, "port": 1234}],
                        },
                    },
                }
            ],
        },
    }


KINDS: dict[str, tuple[str, Callable[[str, str, str], Obj]]] = {
    "Goop": ("/apis/goop.example.com/v1alpha1/namespaces/{ns}/goops", goop),
    "VirtualService": ("/apis/servicemesh.l7mp.io/v1/namespaces/{ns}/virtualservices", virtual_service),
}


class Client:
    """Raw HTTPS POSTs to the API server with the kubeconfig's credentials (no client library overhead)."""

    def __init__(self, kubeconfig: Path) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        self.host = configuration.host
        self.ssl = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            self.ssl.load_cert_chain(configuration.cert_file, configuration.key_file)
        token = configuration.api_key.get("authorization") if configuration.api_key else None
        self.headers = {"Content-Type": "application/json", **({"Authorization": token} if token else {})}

    async def run(self, path: str, bodies: list[Obj], load: Load) -> list[float]:
        """Create every body under `load`; each request's round trip in milliseconds.

        Paced, request i starts no earlier than i / rate seconds after the first (later when every client is
        busy); closed-loop, each client sends its next request as soon as its last one returns.
        """
        latencies: list[float] = []
        queue = list(reversed(list(enumerate(bodies))))
        connector = aiohttp.TCPConnector(limit=load.clients, ssl=self.ssl)
        async with aiohttp.ClientSession(self.host, connector=connector, headers=self.headers) as session:
            first = time.perf_counter()

            async def worker() -> None:
                while queue:
                    index, body = queue.pop()
                    if load.rate is not None:
                        await asyncio.sleep(max(0.0, first + index / load.rate - time.perf_counter()))
                    started = time.perf_counter()
                    async with session.post(path, data=json.dumps(body)) as response:
                        text = await response.text()
                    if response.status != 201:
                        raise RuntimeError(f"create failed ({response.status}): {text[:500]}")
                    latencies.append((time.perf_counter() - started) * 1000)

            await asyncio.gather(*(worker() for _ in range(load.clients)))
        return latencies


def apiserver_pid(host: str) -> int | None:
    """The local kube-apiserver serving `host` (https://127.0.0.1:PORT), found by its --secure-port."""
    flag = f"--secure-port={urlsplit(host).port}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"kube-apiserver") and flag in args:
            return int(entry.name)
    return None


class Bench:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.api = api_client(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.client = Client(kubeconfig)
        self.apiserver = apiserver_pid(self.client.host)
        self.label = uuid.uuid4().hex[:10]
        bundle = generate(["127.0.0.1"])
        tls = workdir / "tls"
        bundle.write(tls)
        port, floor_port = free_ports(2)
        self.process = ServiceProcess(
            "webhook",
            kubeconfig,
            workdir / "logs",
            env={
                "TOLLGATE_WEBHOOK_HOST": "127.0.0.1",
                "TOLLGATE_WEBHOOK_PORT": str(port),
                "TOLLGATE_WEBHOOK_CERT_DIR": str(tls),
                "TOLLGATE_WEBHOOK_LABEL_SELECTOR": f"{LABEL}={self.label}",
                "TOLLGATE_WEBHOOK_LOG_LEVEL": "WARNING",
            },
        )
        self.floor_arguments = [f"127.0.0.1:{floor_port}", str(tls)]
        self.floor: subprocess.Popen[bytes] | None = None
        tollgate = Registration(
            ca_bundle=bundle.ca,
            url=f"https://127.0.0.1:{port}",
            name=f"tollgate-webhook-bench-{self.label}",
            object_selector={"matchLabels": {LABEL: self.label}},
        )
        floor = replace(tollgate, url=f"https://127.0.0.1:{floor_port}", name=f"tollgate-webhook-floor-{self.label}")
        self.registrations = {"tollgate": tollgate, "floor": floor}
        self.namespaces: list[str] = []

    def start(self) -> None:
        self.floor = subprocess.Popen([str(gobuild.build("floor")), *self.floor_arguments])
        self.process.start().wait_ready()

    def namespace(self) -> str:
        name = f"bench-webhook-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        self.namespaces.append(name)
        return name

    def _answering(self) -> Mode:
        """Which webhook the API server calls now, from a dry-run Goop with a blank cmd that both refuse."""
        probe = goop("default", f"probe-{self.label}", self.label)
        probe["spec"]["cmd"] = " "
        try:
            self.custom.create_namespaced_custom_object(
                "goop.example.com", "v1alpha1", "default", "goops", probe, dry_run="All"
            )
        except client.ApiException as error:
            if "must not be blank" in str(error.body):
                return "tollgate"
            if FLOOR_DRY_RUN_REFUSAL in str(error.body):
                return "floor"
            raise
        return "baseline"

    def use(self, mode: Mode) -> None:
        """Register `mode`'s webhook alone (through no webhook at all, so two are never called together)."""
        for registered in self.registrations:
            unregister(self.api, self.registrations[registered].name)
        wait_for(lambda: self._answering() == "baseline", "the webhooks to be removed", timeout=60)
        if mode != "baseline":
            register(self.api, self.registrations[mode])
            wait_for(lambda: self._answering() == mode, f"the {mode} webhook to be called", timeout=60)

    def _webhook_pid(self, mode: Mode) -> int | None:
        if mode == "tollgate":
            return self.process.process.pid if self.process.process is not None else None
        return self.floor.pid if mode == "floor" and self.floor is not None else None

    def phase(self, kind: str, load: Load, requests: int, mode: Mode, sample: Sample) -> None:
        path, build = KINDS[kind]
        namespace = self.namespace()
        tag = namespace.rsplit("-", 1)[-1]  # names unique across phases: VirtualService names are cluster-wide
        bodies = [build(namespace, f"b{tag}-{index}", self.label) for index in range(requests)]
        warmup = [build(namespace, f"w{tag}-{index}", self.label) for index in range(max(load.clients, 20))]
        asyncio.run(self.client.run(path.format(ns=namespace), warmup, load))
        pid = self._webhook_pid(mode)
        calls = self.webhook_calls()
        apiserver_before = cpu_seconds(self.apiserver) if self.apiserver else 0.0
        webhook_before = cpu_seconds(pid) if pid else 0.0
        sample.latencies += asyncio.run(self.client.run(path.format(ns=namespace), bodies, load))
        sample.creates += len(bodies)
        if self.apiserver:
            sample.apiserver_cpu += cpu_seconds(self.apiserver) - apiserver_before
        if pid:
            sample.webhook_cpu += cpu_seconds(pid) - webhook_before
        calls_after = self.webhook_calls()
        sample.webhook_calls += calls_after[0] - calls[0]
        sample.webhook_call_seconds += calls_after[1] - calls[1]

    def webhook_calls(self) -> tuple[float, float]:
        """Webhook calls the API server has made, and the seconds they took by its own clock (its /metrics)."""
        request = urllib.request.Request(f"{self.client.host}/metrics", headers=self.client.headers)
        with urllib.request.urlopen(request, context=self.client.ssl, timeout=10) as response:
            lines = response.read().decode().splitlines()
        totals = {"count": 0.0, "sum": 0.0}
        for line in lines:
            for suffix in totals:
                if line.startswith(f"apiserver_admission_webhook_admission_duration_seconds_{suffix}{{"):
                    totals[suffix] += float(line.rsplit(" ", 1)[1])
        return totals["count"], totals["sum"]

    def close(self) -> None:
        for registration in self.registrations.values():
            unregister(self.api, registration.name)
        self.process.stop()
        if self.floor is not None:
            self.floor.terminate()
            self.floor.wait(timeout=10)
        for namespace in self.namespaces:
            self.core.delete_namespace(namespace, propagation_policy="Background")


def ms(value: float) -> str:
    return f"{value:.1f} ms"


# The targets of issue #18, each a ratio to the floor measured in the same run.
CPU_TARGET = 1.5  # webhook CPU per review, tollgate / floor
ADDED_P50_TARGET = 1.5  # added p50 over baseline at the paced load, tollgate / floor


@dataclass(frozen=True)
class Target:
    """One target for one kind: the floor's and tollgate's numbers, their ratio and whether it is met."""

    kind: str
    name: str
    floor: float
    tollgate: float
    limit: float

    @property
    def ratio(self) -> float | None:
        """tollgate / floor; None when the floor's number is not above zero (within noise of the baseline)."""
        return self.tollgate / self.floor if self.floor > 0 else None

    @property
    def met(self) -> bool:
        return self.ratio is not None and self.ratio <= self.limit


Measured = tuple[str, Load, dict[Mode, Sample]]  # kind, load, each mode's sample


def summary(rows: list[Measured]) -> list[Target]:
    """Per kind: webhook CPU per review over all of the kind's rows (CPU / the API server's count of calls), and
    the p50 each webhook adds over the baseline at the paced load (if the run had one)."""
    targets: list[Target] = []
    for kind in dict.fromkeys(kind for kind, _, _ in rows):
        kind_rows = [samples for row_kind, _, samples in rows if row_kind == kind]

        def per_review(mode: Mode, kind_rows: list[dict[Mode, Sample]] = kind_rows) -> float:
            calls = sum(samples[mode].webhook_calls for samples in kind_rows)
            return sum(samples[mode].webhook_cpu for samples in kind_rows) / max(calls, 1) * 1000

        targets.append(
            Target(kind, "webhook CPU per review (ms)", per_review("floor"), per_review("tollgate"), CPU_TARGET)
        )
        for row_kind, load, samples in rows:
            if row_kind == kind and load.rate is not None:
                p50 = {mode: percentile(samples[mode].latencies, 0.5) for mode in MODES}
                targets.append(
                    Target(
                        kind,
                        f"added p50, {load.describe()} (ms)",
                        p50["floor"] - p50["baseline"],
                        p50["tollgate"] - p50["baseline"],
                        ADDED_P50_TARGET,
                    )
                )
    return targets


def print_tables(rows: list[Measured]) -> None:
    print()
    print(f"load average {' '.join(f'{value:.1f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    print()
    print(
        "| kind | clients | creates per mode | p50 baseline / floor / tollgate | p99 baseline / floor / tollgate "
        "| tollgate adds at p99 | floor adds at p99 | API server CPU per create | webhook CPU per create "
        "(floor / tollgate) | webhook call, API server's clock (floor / tollgate) |"
    )
    print("| --- | ---: | ---: | --- | --- | ---: | ---: | --- | --- | --- |")
    for kind, load, samples in rows:
        p50 = " / ".join(ms(percentile(samples[mode].latencies, 0.5)) for mode in MODES)
        p99s = {mode: percentile(samples[mode].latencies, 0.99) for mode in MODES}
        p99 = " / ".join(ms(p99s[mode]) for mode in MODES)
        cpu = " / ".join(ms(samples[mode].apiserver_cpu / samples[mode].creates * 1000) for mode in MODES)
        webhook_cpu = " / ".join(ms(samples[mode].webhook_cpu / samples[mode].creates * 1000) for mode in MODES[1:])
        calls = " / ".join(
            ms(samples[mode].webhook_call_seconds / max(samples[mode].webhook_calls, 1) * 1000) for mode in MODES[1:]
        )
        print(
            f"| {kind} | {load.describe()} | {samples['baseline'].creates} | {p50} | {p99} "
            f"| {p99s['tollgate'] - p99s['baseline']:+.1f} ms | {p99s['floor'] - p99s['baseline']:+.1f} ms "
            f"| {cpu} | {webhook_cpu} | {calls} |"
        )
    print()
    print("| kind | target | floor | tollgate | tollgate / floor | limit | met |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for target in summary(rows):
        ratio = f"{target.ratio:.2f}x" if target.ratio is not None else "n/a (floor within noise)"
        print(
            f"| {target.kind} | {target.name} | {target.floor:.2f} | {target.tollgate:.2f} | {ratio} "
            f"| {target.limit:g}x | {'met' if target.met else 'NOT met'} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster with the CRDs; default: start one")
    parser.add_argument("--requests", type=int, default=900, help="creates per mode at 50 clients (1/5 at 1)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the three modes per row")
    parser.add_argument("--paced-rate", type=float, default=100, help="creates per second of the paced 50 clients")
    parser.add_argument(
        "--loads", nargs="+", default=list(LOADS), choices=list(LOADS), help="which loads to run (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="Goop only, the paced load, 1 round of 150 (CI smoke)")
    parser.add_argument("--json", type=Path, help="write the targets' figures here as JSON (bench/report.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.kinds, args.loads, args.rounds, args.requests = ["Goop"], ["paced"], 1, 150
    every = {"1": Load(1), "50": Load(50), "paced": Load(50, args.paced_rate)}
    loads = [every[name] for name in LOADS if name in args.loads]
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        workdir = Path(tmp)
        cluster = None
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            cluster = EmbeddedCluster(f"bench-webhook-{uuid.uuid4().hex[:6]}", workdir / "kwok", workdir / "kubeconfig")
            cluster.up(1)
            cluster.install_crds()
            kubeconfig = cluster.kubeconfig
        bench = Bench(kubeconfig, workdir)
        rows: list[Measured] = []
        try:
            bench.start()
            for kind in args.kinds:
                for load in loads:
                    requests = args.requests if load.clients > 1 else max(args.requests // 5, 50)
                    samples = {mode: Sample() for mode in MODES}
                    for _ in range(args.rounds):
                        for mode in MODES:
                            bench.use(mode)
                            bench.phase(kind, load, requests // args.rounds, mode, samples[mode])
                    rows.append((kind, load, samples))
        finally:
            bench.close()
            if cluster is not None:
                cluster.down()
    print_tables(rows)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([dataclasses.asdict(target) for target in summary(rows)]) + "\n")
    return 0


def rows(results: list[dict[str, Any]]) -> list[report.Row]:
    """The combined table's rows (bench/report.py): each target of `summary`, tollgate against the Go floor."""
    out = []
    for found in results:
        target = Target(**found)
        what, unit = target.name.rsplit(" (", 1)
        unit = unit.rstrip(")")
        out.append(
            report.Row(
                what=f"webhook: {target.kind}, {what}",
                tollgate=f"{target.tollgate:.2f} {unit}",
                peer=f"{target.floor:.2f} {unit} (a do-nothing Go webhook)",
                ratio=target.ratio,
                target=f"at most {target.limit:g}x",
                met=target.met,
            )
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
