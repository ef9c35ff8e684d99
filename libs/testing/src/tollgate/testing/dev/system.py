"""DevSystem: the whole system on the embedded cluster, started and stopped in the order of
deploy/local/resources.yaml."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tollgate.testing.cluster import dev_cluster, dev_dir
from tollgate.testing.dev.data_path import EchoThread
from tollgate.testing.dev.progress import Progress
from tollgate.testing.dev.steps import STEPS, Resource, deregister_webhook, local_resources
from tollgate.testing.dev.summary import summarize
from tollgate.testing.dev.supervisor import Restarter, rotate_logs
from tollgate.testing.jaeger import Jaeger
from tollgate.testing.services import ServiceProcess


class DevSystem:
    def __init__(self, root: Path, state: Path | None = None, progress: Progress | None = None) -> None:
        """`root` is the checkout (CRDs, samples); `state` holds the cluster, logs and certificates (.dev)."""
        self.root = root
        self.progress = progress or Progress()
        self.dev_dir = state or dev_dir(root)
        self.cluster = dev_cluster(root, self.dev_dir, "tollgate" if state is None else "tollgate-dev")
        self.cluster.real_node = True  # the Envoys the system configures run as containers
        self.resources = local_resources(root, self.dev_dir)
        self.processes: dict[str, ServiceProcess] = {}
        self.restarter = Restarter(self.processes, self.say)
        self.echo: EchoThread | None = None
        self.proof: list[str] = []
        # The trace backend: every service sends its spans there (OTEL_EXPORTER_OTLP_ENDPOINT).
        self.jaeger = Jaeger(self.dev_dir / "jaeger")
        self.steps: dict[str, Callable[[], None]] = {name: partial(step, self) for name, step in STEPS.items()}

    def say(self, text: str) -> None:
        self.progress.say(text)

    def ports(self) -> dict[int, str]:
        """The ports the services listen on (deploy/local/resources.yaml): port -> what needs it."""
        ports = {}
        for resource in self.resources:
            if resource.health is not None:
                ports[resource.health] = f"{resource.name} health"
            for name, endpoint in resource.endpoints.items():
                port = re.search(r":(\d+)(?:/|$)", endpoint)
                if port is not None:
                    ports[int(port.group(1))] = f"{resource.name} {name}"
        return ports

    def start(self) -> None:
        rotate_logs(self.dev_dir / "logs", [r.name for r in self.resources if r.module is not None])
        with self.progress.waiting(f"Jaeger to answer {self.jaeger.ui_url}"):
            self.jaeger.start()
        self.say(f"traces     Jaeger UI {self.jaeger.ui_url} (OTLP {self.jaeger.otlp_endpoint}, in memory)")
        self.restarter.start()
        for resource in self.resources:
            if resource.step is not None:
                self.steps[resource.step]()
            else:
                process = self.service_process(resource)
                self.processes[resource.name] = process
                self.say(f"  {resource.name:<10} starting (log {process.log_path})")
                with self.progress.waiting(f"{resource.name} to answer {process.health_url}/readyz"):
                    process.start().wait_ready(timeout=120)
                self.say(f"  {resource.name:<10} ready   health {process.health_url}")

    def service_process(self, resource: Resource) -> ServiceProcess:
        assert resource.module is not None and resource.health is not None
        process = ServiceProcess(
            resource.name,
            self.cluster.kubeconfig,
            self.dev_dir / "logs",
            env={**self.jaeger.env(), **resource.env},
            module=resource.module,
            health_port=resource.health,
        )
        process.log_path = self.dev_dir / "logs" / f"{resource.name}.log"
        return process

    def resource(self, name: str) -> Resource:
        return next(r for r in self.resources if r.name == name)

    @property
    def webhook_dir(self) -> Path:
        """The webhook's serving pair and CA, which its registration trusts."""
        return self.dev_dir / "webhook"

    @property
    def allocator_dir(self) -> Path:
        """The allocator's serving pair and CA, and root's token for the registration API (root.token)."""
        return self.dev_dir / "allocator"

    @property
    def xds_debug_url(self) -> str:
        """The xds debug API, which `epicctl proxy-status --xds-url` asks: here xds is a process, not a pod the API
        server's pods proxy would find (docs/xds.md, *Debug API*)."""
        return self.resource("xds").endpoints["debug"].removesuffix("/debug/envoys")

    def stop(self) -> None:
        self.restarter.stop()
        if "webhook" in self.processes:
            deregister_webhook(self)
        for name, process in reversed(self.processes.items()):
            code = process.stop()
            self.say(f"  {name:<10} stopped (exit {code})")
        self.processes.clear()
        if self.echo is not None:
            self.echo.stop()
        self.jaeger.stop()

    def summary(self) -> str:
        return summarize(self)
