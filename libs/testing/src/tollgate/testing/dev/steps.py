"""deploy/local/resources.yaml, the local system's one description (`make dev` and Tilt's local mode read it): its
resources, each a process (`module`) or a one-shot step (`step`), and the steps it names, each a function of the
DevSystem (`python -m tollgate.testing.dev step S` runs one alone)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tollgate.testing.agents import CA_FILE
from tollgate.testing.dev.certificates import write_certificates
from tollgate.testing.dev.data_path import prove_data_path

if TYPE_CHECKING:
    from tollgate.testing.dev.system import DevSystem

RESOURCES_FILE = Path("deploy") / "local" / "resources.yaml"


@dataclass(frozen=True)
class Resource:
    """One entry of deploy/local/resources.yaml: a process (`module`) or a one-shot step (`step`)."""

    name: str
    module: str | None = None
    step: str | None = None
    health: int | None = None
    after: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)


def local_resources(root: Path, dev_dir: Path) -> list[Resource]:
    """The local system's resources in start order, with {dev} replaced by the state directory."""
    entries = yaml.safe_load((root / RESOURCES_FILE).read_text())["resources"]
    return [
        Resource(
            name=entry["name"],
            module=entry.get("module"),
            step=entry.get("step"),
            health=entry.get("health"),
            after=tuple(entry.get("after", ())),
            env={key: str(value).replace("{dev}", str(dev_dir)) for key, value in entry.get("env", {}).items()},
            endpoints=entry.get("endpoints", {}),
        )
        for entry in entries
    ]


def start_cluster(system: DevSystem) -> None:
    cluster = system.cluster
    system.say(f"cluster    starting (etcd, kube-apiserver, controllers, kwok; logs {cluster.logs_dir()})")
    with system.progress.waiting("the embedded cluster, its real node and 3 KWOK nodes to be ready"):
        seconds = cluster.up(3)
    system.say(f"cluster ready in {seconds:.1f} s (KUBECONFIG={cluster.kubeconfig})")


def install_crds(system: DevSystem) -> None:
    system.cluster.install_crds()
    system.cluster.kubectl("create", "namespace", "tollgate-system", check=False)
    system.say("  CRDs       installed")


def register_webhook(system: DevSystem) -> None:
    """The webhook's mutating and validating configurations, trusting its CA (written by the `certificates` step)."""
    command = [sys.executable, "-m", "tollgate.webhook.cli", "configurations",
               "--url", system.resource("webhook").endpoints["admission"],
               "--ca-file", str(system.webhook_dir / CA_FILE)]  # fmt: skip
    configurations = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    system.cluster.kubectl("apply", "-f", "-", stdin=configurations)
    system.say("  webhook    registered for every kind")


def deregister_webhook(system: DevSystem) -> None:
    # failurePolicy is Fail: a registration left behind would refuse every tollgate object.
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        system.cluster.kubectl("delete", kind, "tollgate-webhook", "--ignore-not-found", check=False)


def _sample_order(path: Path) -> tuple[bool, str]:
    return (not path.name.startswith("epic-"), path.name)


def apply_samples(system: DevSystem) -> None:
    for sample in sorted((system.root / "deploy" / "samples").glob("*.yaml"), key=_sample_order):
        system.cluster.kubectl("apply", "-f", str(sample))
    system.say("  samples    applied (through the webhook)")


STEPS: dict[str, Callable[[DevSystem], None]] = {
    "cluster": start_cluster,
    "crds": install_crds,
    "certificates": write_certificates,
    "register-webhook": register_webhook,
    "samples": apply_samples,
    "data-path": prove_data_path,
}
"""The steps deploy/local/resources.yaml may name, in the order `make dev` runs them."""
