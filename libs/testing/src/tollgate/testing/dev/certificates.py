"""The dev system's TLS and credentials, in its state directory: the webhook's CA and serving pair (its registration
trusts that CA), the allocator's (its registration API serves TLS), and root's token for the registration API,
minted as a user mints it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tollgate.cli.exits import Exit
from tollgate.testing.agents import certificates

if TYPE_CHECKING:
    from tollgate.testing.dev.system import DevSystem

ROOT_TOKEN = "root.token"


def write_certificates(system: DevSystem) -> None:
    """The `certificates` step: the webhook's pair for the address it listens on, then the allocator's."""
    certificates(system.webhook_dir, hosts=("127.0.0.1",))
    system.say(f"  webhook    certificates in {system.webhook_dir}")
    certificates(system.allocator_dir)
    system.say(f"  allocator  certificates in {system.allocator_dir} (the registration API serves TLS)")


def mint_root_token(system: DevSystem) -> Path:
    """The root account's token, minted as a user mints it: `epicctl credentials create` (rotate when the
    account has one already, exit 4)."""
    token_file = system.allocator_dir / ROOT_TOKEN
    for verb in ("create", "rotate"):
        command = [sys.executable, "-m", "tollgate.cli.epicctl", "credentials", verb, "root",
                   "--token-file", str(token_file), "--kubeconfig", str(system.cluster.kubeconfig)]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode == 0:
            return token_file
        if result.returncode != Exit.CONFLICT:
            raise RuntimeError(f"epicctl credentials {verb} root: {result.stderr.strip()}")
    raise RuntimeError("epicctl credentials: root's token was neither created nor rotated")
