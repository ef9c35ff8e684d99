"""Admission latency the API server adds with the webhook: create round trips with and without it.

Each phase creates objects through the API server from 1 or 50 concurrent clients (asyncio, one HTTP
connection each) and records every request's round trip. The baseline is the same kind, same run, with the
webhook configurations removed; the webhook phases run with them registered (defaulting and validation:
two admission calls per create). The two alternate in rounds. Prints one table: p50/p99 of each, the p99
the webhook adds, the ratio, the mean time a review spends inside the webhook (its own metric), and the
machine's load average (API server, etcd, webhook and clients share its cores).

    .venv/bin/python bench/webhook.py                  # its own embedded cluster (about 7 s to start)
    .venv/bin/python bench/webhook.py --kubeconfig .dev/kubeconfig --requests 3000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import client, config

from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.net import free_port
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for
from tollgate.webhook.certs import generate
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

LABEL = "webhook.tollgate.io/bench"
Obj = dict[str, Any]


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

    async def run(self, path: str, bodies: list[Obj], concurrency: int) -> list[float]:
        """Create every body from `concurrency` workers; each request's round trip in milliseconds."""
        latencies: list[float] = []
        queue = list(reversed(bodies))
        connector = aiohttp.TCPConnector(limit=concurrency, ssl=self.ssl)
        async with aiohttp.ClientSession(self.host, connector=connector, headers=self.headers) as session:

            async def worker() -> None:
                while queue:
                    body = queue.pop()
                    started = time.perf_counter()
                    async with session.post(path, data=json.dumps(body)) as response:
                        text = await response.text()
                    if response.status != 201:
                        raise RuntimeError(f"create failed ({response.status}): {text[:500]}")
                    latencies.append((time.perf_counter() - started) * 1000)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


class Bench:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.api = api_client(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.client = Client(kubeconfig)
        self.label = uuid.uuid4().hex[:10]
        bundle = generate(["127.0.0.1"])
        bundle.write(workdir / "tls")
        port = free_port()
        self.process = ServiceProcess(
            "webhook",
            kubeconfig,
            workdir / "logs",
            env={
                "TOLLGATE_WEBHOOK_HOST": "127.0.0.1",
                "TOLLGATE_WEBHOOK_PORT": str(port),
                "TOLLGATE_WEBHOOK_CERT_DIR": str(workdir / "tls"),
                "TOLLGATE_WEBHOOK_LABEL_SELECTOR": f"{LABEL}={self.label}",
                "TOLLGATE_WEBHOOK_LOG_LEVEL": "WARNING",
            },
        )
        self.registration = Registration(
            ca_bundle=bundle.ca,
            url=f"https://127.0.0.1:{port}",
            name=f"tollgate-webhook-bench-{self.label}",
            object_selector={"matchLabels": {LABEL: self.label}},
        )
        self.namespaces: list[str] = []

    def namespace(self) -> str:
        name = f"bench-webhook-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        self.namespaces.append(name)
        return name

    def _probe_refused(self) -> bool:
        """Whether the API server currently calls the webhook (a blank-cmd Goop, dry run, is then refused)."""
        probe = goop("default", f"probe-{self.label}", self.label)
        probe["spec"]["cmd"] = " "
        try:
            client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                "goop.example.com", "v1alpha1", "default", "goops", probe, dry_run="All"
            )
        except client.ApiException as error:
            return "must not be blank" in str(error.body)
        return False

    def webhook(self, on: bool) -> None:
        if on:
            register(self.api, self.registration)
        else:
            unregister(self.api, self.registration.name)
        wait_for(lambda: self._probe_refused() == on, f"the webhook to be {'on' if on else 'off'}", timeout=60)

    def phase(self, kind: str, concurrency: int, requests: int) -> list[float]:
        path, build = KINDS[kind]
        namespace = self.namespace()
        tag = namespace.rsplit("-", 1)[-1]  # names unique across phases: VirtualService names are cluster-wide
        bodies = [build(namespace, f"b{tag}-{index}", self.label) for index in range(requests)]
        warmup = [build(namespace, f"w{tag}-{index}", self.label) for index in range(max(concurrency, 20))]
        asyncio.run(self.client.run(path.format(ns=namespace), warmup, concurrency))
        return asyncio.run(self.client.run(path.format(ns=namespace), bodies, concurrency))

    def review_seconds(self) -> tuple[float, float]:
        """Total seconds the webhook spent answering reviews, and how many it answered (from its /metrics)."""
        with urllib.request.urlopen(f"{self.process.health_url}/metrics", timeout=10) as response:
            text = response.read().decode()
        total = {"sum": 0.0, "count": 0.0}
        for line in text.splitlines():
            for suffix in total:
                if line.startswith(f"tollgate_webhook_admission_seconds_{suffix}{{"):
                    total[suffix] += float(line.rsplit(" ", 1)[1])
        return total["sum"], total["count"]

    def close(self) -> None:
        unregister(self.api, self.registration.name)
        self.process.stop()
        for namespace in self.namespaces:
            self.core.delete_namespace(namespace, propagation_policy="Background")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster with the CRDs; default: start one")
    parser.add_argument("--requests", type=int, default=1000, help="creates per phase at 50 clients (1/5 at 1)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--rounds", type=int, default=3, help="baseline/webhook alternations per row")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        workdir = Path(tmp)
        cluster = None
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            cluster = EmbeddedCluster(f"bench-webhook-{uuid.uuid4().hex[:6]}", workdir / "kwok", workdir / "kubeconfig")
            cluster.up(1)
            cluster.kubectl("apply", "--server-side", "-f", str(repo_root() / "crds"))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=tollgate")
            kubeconfig = cluster.kubeconfig
        bench = Bench(kubeconfig, workdir)
        rows = []
        try:
            bench.process.start().wait_ready()
            for kind in args.kinds:
                for concurrency in (1, 50):
                    requests = args.requests if concurrency > 1 else max(args.requests // 5, 50)
                    baseline: list[float] = []
                    webhook: list[float] = []
                    spent, answered = bench.review_seconds()
                    # Alternate in rounds, so a change in the machine's load falls on both sides alike.
                    for _ in range(args.rounds):
                        bench.webhook(False)
                        baseline += bench.phase(kind, concurrency, requests // args.rounds)
                        bench.webhook(True)
                        webhook += bench.phase(kind, concurrency, requests // args.rounds)
                    spent_after, answered_after = bench.review_seconds()
                    in_webhook = (spent_after - spent) / max(answered_after - answered, 1) * 1000
                    rows.append((kind, concurrency, len(baseline), baseline, webhook, in_webhook))
        finally:
            bench.close()
            if cluster is not None:
                cluster.down()
    print()
    print(f"load average {' '.join(f'{value:.1f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    print()
    print(
        "| kind | clients | creates | baseline p50 | webhook p50 | baseline p99 | webhook p99 | added p99 | p99 ratio "
        "| in webhook (mean per review) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, concurrency, requests, baseline, webhook, in_webhook in rows:
        b50, w50 = percentile(baseline, 50), percentile(webhook, 50)
        b99, w99 = percentile(baseline, 99), percentile(webhook, 99)
        print(
            f"| {kind} | {concurrency} | {requests} | {b50:.1f} ms | {w50:.1f} ms | {b99:.1f} ms | {w99:.1f} ms "
            f"| {w99 - b99:+.1f} ms | {w99 / b99:.2f}x | {in_webhook:.2f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
