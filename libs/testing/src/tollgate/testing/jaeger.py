"""Jaeger v2 as the trace backend of `make dev` and the tracing test: its in-memory storage, OTLP/HTTP in, the UI and
its query API (`/api/traces`) out, every port a free one on 127.0.0.1.

The binary is built by `hack/tools.sh jaeger` (make dev runs it first; make test starts it in the background). When it
is missing, `jaeger_binary()` runs that build itself, which waits for a build already running and then finds it.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, Any

import yaml

from tollgate.testing.net import free_ports
from tollgate.testing.tools import built_tool
from tollgate.testing.wait import wait_for


def jaeger_binary() -> Path:
    return built_tool("jaeger", "jaeger")


def config(otlp_port: int, query_port: int, query_grpc_port: int) -> dict[str, Any]:
    """The collector configuration: OTLP/HTTP receiver, memory storage, query service; no other listener."""
    host = "127.0.0.1"
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"]}
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                "http": {"endpoint": f"{host}:{query_port}"},
                "grpc": {"endpoint": f"{host}:{query_grpc_port}"},
            },
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"{host}:{otlp_port}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


class Jaeger:
    """One Jaeger process; `otlp_endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT names, `ui_url` what a user opens."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.otlp_port, self.query_port, self.query_grpc_port = free_ports(3)
        self.log_path = workdir / "jaeger.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def env(self) -> dict[str, str]:
        """What a service needs to send its spans here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}

    def start(self, timeout: float = 60) -> Jaeger:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "jaeger.yaml"
        path.write_text(yaml.safe_dump(config(self.otlp_port, self.query_port, self.query_grpc_port)))
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [str(jaeger_binary()), "--config", str(path)], stdout=self._log, stderr=subprocess.STDOUT
        )
        wait_for(self._ready, f"Jaeger to answer {self.ui_url}/api/services (log {self.log_path})", timeout=timeout)
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"Jaeger exited with {self.process.returncode}: {self.log_path.read_text()[-4000:]}")
        try:
            self.query("/api/services")
        except (urllib.error.URLError, OSError):
            return False
        return True

    def query(self, path: str, **params: str | int) -> Any:
        """A GET of the query API, its JSON body."""
        url = f"{self.ui_url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    def traces(self, service: str, lookback: str = "1h", limit: int = 200) -> list[dict[str, Any]]:
        """The traces that have a span of `service` (the query API's `data`)."""
        return list(self.query("/api/traces", service=service, lookback=lookback, limit=limit).get("data") or [])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
