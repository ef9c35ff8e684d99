"""Run a tollgate service as a real subprocess against a cluster, and keep its logs for when a test fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from tollgate.testing.cluster import endpoint_policy_env
from tollgate.testing.net import free_ports
from tollgate.testing.wait import wait_for

# What a service listens on besides its health port and what a test sets: moved off its fixed default, so that
# services of concurrent tests (or replicas in one) never meet on a port.
OTHER_LISTENERS = {"allocator": ("REST_ADDRESS",)}


class ServiceProcess:
    """`python -m tollgate.<name>` with its own kubeconfig, health port and log file."""

    def __init__(
        self,
        name: str,
        kubeconfig: Path,
        log_dir: Path,
        env: dict[str, str] | None = None,
        module: str | None = None,
        health_port: int | None = None,
    ) -> None:
        self.name = name
        self.module = module or f"tollgate.{name}"
        self.kubeconfig = kubeconfig
        self.log_path = log_dir / f"{name}-{os.getpid()}-{id(self)}.log"
        others = OTHER_LISTENERS.get(name, ())
        *other_ports, picked_health_port = free_ports(len(others) + 1)
        self.health_port = health_port or picked_health_port
        prefix = f"TOLLGATE_{name.upper()}_"
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            f"{prefix}KUBECONFIG": str(kubeconfig),
            f"{prefix}HEALTH_HOST": "127.0.0.1",
            f"{prefix}HEALTH_PORT": str(self.health_port),
            f"{prefix}LOG_LEVEL": "DEBUG",
            **endpoint_policy_env(name),
            **{f"{prefix}{setting}": f"127.0.0.1:{port}" for setting, port in zip(others, other_ports, strict=True)},
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module], env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.logs()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{self.health_url}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def wait_ready(self, timeout: float = 60) -> ServiceProcess:
        wait_for(self._ready, f"{self.name} /readyz", timeout=timeout, interval=0.2)
        return self

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM and wait (SIGKILL after `timeout`); the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to clean up."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
