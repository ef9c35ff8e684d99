"""`epicctl`: user namespaces, accounts, load balancers and tunnels of an EPIC system, with kubectl's habits.

    epicctl create user-namespace NAME
    epicctl create|delete user USERNAME -a ACCOUNT [--password-file FILE]
    epicctl credentials create|rotate ACCOUNT [--token-file FILE]
    epicctl get accounts | loadbalancers | tunnels | endpoints [-a ACCOUNT] [-o table|wide|json|yaml|name]
    epicctl describe lb NAME [-a ACCOUNT]
    epicctl proxy-status [POD.NAMESPACE] [--stale-after SECONDS] [-o table|wide|json|yaml]
    epicctl proxy-config POD.NAMESPACE listeners|clusters|endpoints [-o table|json|yaml]
    epicctl version [--client]
    epicctl completion bash|zsh|fish

`--kubeconfig` and `--context` go before or after the command, and the cluster is found as kubectl finds it
(tollgate.cli.kubeconfig). A failure prints one line and exits with its code (tollgate.cli.exits).

Each command is thin: it reads through `Session.epic()` (tollgate.cli.api) and prints with `show`/`show_list`
(tollgate.cli.render). A new command is a function with `@connection_options` and `@click.pass_obj`, in the module
of its theme (`accounts`, `listing`, `proxies`, `about`; what they share is in `common`), added to `cli` below.
"""

from __future__ import annotations

import click

from tollgate.cli.epicctl.about import completion, version
from tollgate.cli.epicctl.accounts import create, credentials, delete
from tollgate.cli.epicctl.common import COMPLETE_VAR, DEPRECATED_N, PROG, Session, cli
from tollgate.cli.epicctl.listing import describe, get
from tollgate.cli.epicctl.proxies import proxy_config, proxy_status
from tollgate.cli.exits import Exit, classify

for command in (create, delete, credentials, get, describe, proxy_status, proxy_config, version, completion):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """Run epicctl with `argv` (default: sys.argv[1:]) and return its exit code (see tollgate.cli.exits)."""
    try:
        result = cli.main(args=argv, prog_name=PROG, complete_var=COMPLETE_VAR, standalone_mode=False, obj=Session())
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        return Exit.INTERRUPTED
    except Exception as error:  # every other failure: one line and its exit code, not a traceback
        code, message = classify(error)
        click.echo(f"{PROG}: {message}".splitlines()[0], err=True)
        return code
    return result if isinstance(result, int) else Exit.OK


__all__ = ["DEPRECATED_N", "cli", "main"]
