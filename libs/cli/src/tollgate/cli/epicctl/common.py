"""What every epicctl command shares: the `cli` group and its connection flags (`--kubeconfig`, `--context`, kept
in the `Session`), the `-o` and `-a` options, and the printing of objects as kubectl prints them."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml
from click.shell_completion import CompletionItem

from tollgate.cli import kubeconfig, render
from tollgate.cli.api import EPICClient
from tollgate.models.base import ResourceInfo

JSON = dict[str, Any]
Command = Callable[..., Any]
PROG = "epicctl"
COMPLETE_VAR = "_EPICCTL_COMPLETE"
DEPRECATED_N = f"{PROG}: flag -n is deprecated, use -a/--account (to kubectl users -n is the namespace)"


class Session:
    """What the connection flags chose, wherever they stood on the command line, and the client made from it."""

    def __init__(self) -> None:
        self.kubeconfig: Path | None = None
        self.context: str | None = None
        self._epic: EPICClient | None = None

    def epic(self) -> EPICClient:
        if self._epic is None:
            self._epic = EPICClient(kubeconfig.load(self.kubeconfig, self.context))
        return self._epic


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None and param.name:
        setattr(ctx.ensure_object(Session), param.name, value)


def _complete_contexts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    session = ctx.ensure_object(Session)
    try:
        files = kubeconfig.kubeconfig_files(session.kubeconfig, os.environ, Path.home()) or []
        merged = kubeconfig.merge([(f, kubeconfig.read(f)) for f in files])
    except kubeconfig.KubeconfigError:
        return []
    return [CompletionItem(c["name"]) for c in merged["contexts"] if str(c["name"]).startswith(incomplete)]


def _complete_accounts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    try:
        accounts = ctx.ensure_object(Session).epic().accounts()
    except Exception:  # completion must never fail the shell: no cluster, no candidates
        return []
    return [CompletionItem(a["metadata"]["name"]) for a in accounts if a["metadata"]["name"].startswith(incomplete)]


def connection_options(command: Command) -> Command:
    """`--kubeconfig` and `--context`, accepted on the top-level command and on every subcommand (as kubectl does)."""
    command = click.option(
        "--context", metavar="NAME", expose_value=False, callback=_remember, shell_complete=_complete_contexts,
        help="The kubeconfig context to use (default: its current-context).",
    )(command)  # fmt: skip
    return click.option(
        "--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), expose_value=False, callback=_remember,
        help="The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).",
    )(command)  # fmt: skip


def output_option(*choices: str) -> Callable[[Command], Command]:
    return click.option(
        "-o", "--output", type=click.Choice(choices), default="table", show_default=True, help="Output format."
    )


def account_option(help_text: str) -> Callable[[Command], Command]:
    """`-a/--account`, and the old `-n` as a deprecated alias that warns on stderr."""

    def decorate(command: Command) -> Command:
        @functools.wraps(command)
        def merged(*args: Any, account: str | None, legacy_account: str | None, **kwargs: Any) -> Any:
            if legacy_account is not None:
                click.echo(DEPRECATED_N, err=True)
                if account not in (None, legacy_account):
                    raise click.UsageError(f"-n {legacy_account} and -a {account} name different accounts")
                account = legacy_account
            return command(*args, account=account, **kwargs)

        merged = click.option("-n", "legacy_account", metavar="ACCOUNT", hidden=True)(merged)
        return click.option("-a", "--account", metavar="ACCOUNT", help=help_text, shell_complete=_complete_accounts)(
            merged
        )

    return decorate


def emit(data: Any, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


def show(obj: JSON, output: str, info: ResourceInfo, text: Callable[[], str]) -> None:
    """One object: its text (table), its `kind.group/name` line (name), or itself (json, yaml)."""
    if output == "table":
        click.echo(text())
    elif output == "name":
        click.echo(render.names([obj], info))
    else:
        emit(obj, output)


def show_list(
    items: list[JSON], output: str, info: ResourceInfo, rows: Callable[[list[JSON]], list[render.Row]],
    listing: tuple[list[str], list[str]],
) -> None:  # fmt: skip
    """Objects as `kubectl get` prints them: a table (wide: more columns), names, or a List (json, yaml)."""
    if output in ("table", "wide"):
        if items:
            click.echo(render.table(rows(items), render.columns(listing, output == "wide")))
        else:
            click.echo("No resources found.", err=True)
    elif output == "name":
        if items:
            click.echo(render.names(items, info))
    else:
        emit(render.kube_list(items), output)


class AliasedGroup(click.Group):
    """A group whose commands also answer to short names (`get lb`), listed under their own names only."""

    def __init__(self, *args: Any, aliases: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = aliases or {}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        _, command, rest = super().resolve_command(ctx, args)
        return (command.name if command else None), command, rest


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@connection_options
def cli() -> None:
    """Manage an EPIC system's accounts, load balancers, tunnels and endpoints.

    The cluster is found as kubectl finds it: --kubeconfig, else $KUBECONFIG (a colon-separated list, merged),
    else ~/.kube/config, else the pod's service account; --context picks a context.
    """
