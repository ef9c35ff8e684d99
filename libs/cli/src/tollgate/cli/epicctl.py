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
(tollgate.cli.render). A new command is a function with `@connection_options` and `@click.pass_obj`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import click
import yaml
from click.shell_completion import CompletionItem, get_completion_class
from kubernetes import client

from tollgate.cli import apiusers, kubeconfig, proxystatus, render
from tollgate.cli import credentials as agent_credentials
from tollgate.cli.api import EPICClient
from tollgate.cli.exits import CommandError, Exit, classify
from tollgate.cli.xdsdebug import DebugClient, Replica
from tollgate.models.base import ResourceInfo
from tollgate.models.epic import Account, LoadBalancer, RemoteEndpoint, account_namespace
from tollgate.runtime import htpasswd

JSON = dict[str, Any]
Command = Callable[..., Any]
PROG = "epicctl"
COMPLETE_VAR = "_EPICCTL_COMPLETE"
SHELLS = ("bash", "zsh", "fish")
LIST_OUTPUTS = ("table", "wide", "json", "yaml", "name")
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


# EPIC's epicctl names the command `api-user` (aliases `api-users`).
USER_ALIASES = {"api-user": "user", "api-users": "user"}


@cli.group(cls=AliasedGroup, aliases=USER_ALIASES)
def create() -> None:
    """Create a user namespace and its account, or an API user of an account."""


@create.command("user-namespace")
@click.argument("name")
@output_option("table", "json", "yaml", "name")
@connection_options
@click.pass_obj
def create_user_namespace(session: Session, name: str, output: str) -> None:
    """Create the user namespace epic-NAME and the Account NAME in it."""
    created = session.epic().create_user_namespace(name)
    done = f"user namespace {account_namespace(name)} and account {name} created"
    show(created, output, Account.resource, lambda: done)


def _check_username(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        htpasswd.check_username(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None
    return value


def user_arguments(command: Command) -> Command:
    """USERNAME, and the account: -a/--account, or EPIC's positional ACCOUNT after USERNAME."""
    command = account_option("The account (or give it after USERNAME, as EPIC's epicctl takes it).")(command)
    command = click.argument("account_arg", metavar="[ACCOUNT]", required=False)(command)
    return click.argument("username", callback=_check_username)(command)


def _one_account(positional: str | None, flag: str | None) -> str:
    if positional and flag and positional != flag:
        raise click.UsageError(f"ACCOUNT {positional} and -a {flag} name different accounts")
    account = positional or flag
    if not account:
        raise click.UsageError("name the account: -a ACCOUNT (or USERNAME ACCOUNT, as EPIC's epicctl takes it)")
    return account


def _read_password(password_file: TextIO | None) -> str:
    if password_file is not None:
        return apiusers.password_from_text(password_file.read())
    if sys.stdin.isatty():
        entered: str = click.prompt(
            "New password", hide_input=True, confirmation_prompt="Retype new password", err=True
        )
        return entered
    return apiusers.password_from_text(sys.stdin.read())


@create.command("user")
@user_arguments
@click.option(
    "--password-file", type=click.File("r"), metavar="FILE",
    help="Read the password from the first line of FILE (- for stdin) instead of prompting.",
)  # fmt: skip
@connection_options
@click.pass_obj
def create_user(
    session: Session, username: str, account_arg: str | None, account: str | None, password_file: TextIO | None
) -> None:
    """Add USERNAME to ACCOUNT's REST API users (HTTP Basic), or give it a new password (alias: api-user).

    Its line USERNAME:$2b$... (bcrypt, cost 12) goes into the key `auth` of the Secret api-users in the user
    namespace epic-ACCOUNT, made when absent; the other users' lines are kept.

    The password is never an argument (the process list would show it): it is asked twice, hidden, on a terminal;
    else it is the first line of stdin or of --password-file (a second line, the confirmation EPIC's epicctl reads,
    must repeat it). At least 6 characters, at most 72 bytes (bcrypt reads no further). Exit 3 when the account does
    not exist; nothing is written then."""
    account = _one_account(account_arg, account)
    epic = session.epic()
    apiusers.check_account(epic.custom, account)
    password = _read_password(password_file)
    try:
        apiusers.check_password(password)
        hashed = htpasswd.hash_password(password)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="password") from None
    replaced = apiusers.set_user(epic.core, account, username, hashed)
    click.echo(f"API user {username} of account {account}: {'password replaced' if replaced else 'created'}")


@cli.group(cls=AliasedGroup, aliases=USER_ALIASES)
def delete() -> None:
    """Delete an API user of an account."""


@delete.command("user")
@user_arguments
@connection_options
@click.pass_obj
def delete_user(session: Session, username: str, account_arg: str | None, account: str | None) -> None:
    """Remove USERNAME from ACCOUNT's REST API users (alias: api-user).

    Exit 0 when it was not there (the message says so); 3 when the account does not exist."""
    account = _one_account(account_arg, account)
    epic = session.epic()
    apiusers.check_account(epic.custom, account)
    removed = apiusers.remove_user(epic.core, account, username)
    click.echo(f"API user {username} of account {account}: {'deleted' if removed else 'not there, nothing to delete'}")


@cli.group()
def credentials() -> None:
    """Mint or rotate an account's token for the registration API.

    The token lives in the Secret tollgate-agent-credentials of the account's user namespace; it lets its holder
    act on that account only. It is printed once (or written to --token-file, mode 0600): keep it with the agent."""


def token_file_option(command: Command) -> Command:
    return click.option(
        "--token-file", type=click.Path(dir_okay=False, writable=True, path_type=Path),
        help="Write the token to this file (mode 0600) instead of printing it.",
    )(command)  # fmt: skip


def hand_over(account: str, token: str, token_file: Path | None, done: str) -> None:
    if token_file is None:
        click.echo(token)
    else:
        agent_credentials.write_token(token_file, token)
    click.echo(f"{done} for account {account}", err=True)


@credentials.command("create")
@click.argument("account")
@token_file_option
@connection_options
@click.pass_obj
def credentials_create(session: Session, account: str, token_file: Path | None) -> None:
    """Mint the first token of ACCOUNT (exit 4 when it has one: rotate it instead)."""
    token = agent_credentials.create(session.epic().core, account)
    hand_over(account, token, token_file, "credentials created")


@credentials.command("rotate")
@click.argument("account")
@token_file_option
@connection_options
@click.pass_obj
def credentials_rotate(session: Session, account: str, token_file: Path | None) -> None:
    """Replace the token of ACCOUNT; the allocator refuses the old one as soon as it sees the change."""
    token = agent_credentials.rotate(session.epic().core, account)
    hand_over(account, token, token_file, "credentials rotated")


GET_ALIASES = {
    "account": "accounts", "acct": "accounts",
    "loadbalancer": "loadbalancers", "lb": "loadbalancers", "lbs": "loadbalancers",
    "tunnel": "tunnels",
    "endpoint": "endpoints", "remoteendpoints": "endpoints", "rep": "endpoints",
}  # fmt: skip


@cli.group(cls=AliasedGroup, aliases=GET_ALIASES)
def get() -> None:
    """List accounts, load balancers, tunnels or endpoints."""


@get.command()
@output_option(*LIST_OUTPUTS)
@connection_options
@click.pass_obj
def accounts(session: Session, output: str) -> None:
    """Accounts (aliases: account, acct)."""
    show_list(session.epic().accounts(), output, Account.resource, render.account_rows, render.ACCOUNT_COLUMNS)


@get.command()
@account_option("Only this account's load balancers.")
@output_option(*LIST_OUTPUTS)
@connection_options
@click.pass_obj
def loadbalancers(session: Session, account: str | None, output: str) -> None:
    """Load balancers (aliases: loadbalancer, lb, lbs)."""
    lbs = session.epic().load_balancers(account)
    show_list(lbs, output, LoadBalancer.resource, render.lb_rows, render.LB_COLUMNS)


@get.command()
@account_option("Only this account's tunnels.")
@output_option("table", "wide", "json", "yaml")
@connection_options
@click.pass_obj
def tunnels(session: Session, account: str | None, output: str) -> None:
    """GUE tunnels, one per load balancer and node (alias: tunnel).

    Tunnels are entries of LoadBalancer status, not objects: -o json|yaml prints the rows, and there is no -o name."""
    rows = render.tunnel_rows(session.epic().load_balancers(account))
    if output in ("json", "yaml"):
        emit(rows, output)
    elif rows:
        click.echo(render.table(rows, render.columns(render.TUNNEL_COLUMNS, output == "wide")))
    else:
        click.echo("No resources found.", err=True)


@get.command()
@account_option("Only this account's endpoints.")
@output_option(*LIST_OUTPUTS)
@connection_options
@click.pass_obj
def endpoints(session: Session, account: str | None, output: str) -> None:
    """Registered endpoints (aliases: endpoint, remoteendpoints, rep)."""
    reps = session.epic().endpoints(account)
    show_list(reps, output, RemoteEndpoint.resource, render.endpoint_rows, render.ENDPOINT_COLUMNS)


@cli.group(cls=AliasedGroup, aliases={"loadbalancer": "lb"})
def describe() -> None:
    """Show one load balancer in detail."""


@describe.command("lb")
@click.argument("name")
@account_option("The load balancer's account (needed when the name is not unique).")
@output_option("table", "json", "yaml", "name")
@connection_options
@click.pass_obj
def describe_lb(session: Session, name: str, account: str | None, output: str) -> None:
    """A load balancer, its conditions, tunnels and events (alias: loadbalancer)."""
    epic = session.epic()
    found = epic.load_balancer(account, name)
    show(found, output, LoadBalancer.resource, lambda: render.describe_lb(found, epic.events(found)))


def xds_options(command: Command) -> Command:
    """Where the xds debug APIs are: each tollgate-xds pod of --xds-namespace (through the API server), or --xds-url."""
    command = click.option(
        "--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="CA bundle that signed the --xds-url debug APIs' certificates (default: the system's).",
    )(command)  # fmt: skip
    command = click.option(
        "--xds-url", "xds_urls", multiple=True, metavar="URL", envvar="EPICCTL_XDS_URL",
        help="A debug API to ask directly (repeatable; $EPICCTL_XDS_URL, space-separated): a replica outside the "
        "cluster, as `make dev` runs it. Default: every tollgate-xds pod, through the API server's pods proxy.",
    )(command)  # fmt: skip
    return click.option(
        "--xds-namespace", default="tollgate-system", show_default=True, metavar="NAMESPACE",
        help="The namespace of the tollgate-xds pods and of the ServiceAccount tollgate-xds-debug.",
    )(command)  # fmt: skip


def _debug_client(session: Session, xds_namespace: str, xds_urls: tuple[str, ...], ca_file: Path | None) -> DebugClient:
    urls = tuple(u for value in xds_urls for u in value.split())
    return DebugClient(session.epic().api, xds_namespace, urls, ca_file)


def _node_id(pod: str) -> str:
    """`name.namespace` (the Envoy's node id, as proxy-status prints it), or `namespace/name`."""
    if "/" in pod:
        namespace, _, name = pod.partition("/")
        return f"{name}.{namespace}"
    if "." not in pod:
        raise click.BadParameter(f"{pod!r}: name the pod as NAME.NAMESPACE (or NAMESPACE/NAME)", param_hint="POD")
    return pod


def _ask_all(replicas: list[Replica], path: str) -> tuple[list[tuple[Replica, Any]], list[CommandError]]:
    """Every replica's answer to `path`, and the failures of those that did not answer."""
    answers, failures = [], []
    for replica in replicas:
        try:
            answers.append((replica, replica.get(path)))
        except CommandError as error:
            failures.append(error)
    return answers, failures


def _report(failures: list[CommandError], partial: bool) -> int:
    """Print each replica's failure; the exit code of the worst (unreachable when some replicas answered)."""
    for failure in failures:
        click.echo(f"{PROG}: {failure}", err=True)
    if not failures:
        return Exit.OK
    return Exit.UNREACHABLE if partial else max(f.code for f in failures)


@cli.command("proxy-status")
@click.argument("pod", required=False)
@click.option(
    "--stale-after", type=click.FloatRange(min=0), default=proxystatus.DEFAULT_STALE_AFTER, show_default=True,
    metavar="SECONDS", help="A response unanswered (neither ACKed nor NACKed) longer than this is STALE.",
)  # fmt: skip
@xds_options
@output_option("table", "wide", "json", "yaml")
@connection_options
@click.pass_obj
def proxy_status(
    session: Session, pod: str | None, stale_after: float, xds_namespace: str, xds_urls: tuple[str, ...],
    ca_file: Path | None, output: str,
) -> int:  # fmt: skip
    """Every Envoy connected to any xds replica, or POD (NAME.NAMESPACE): what it serves, and per type (CDS, LDS,
    EDS) SYNCED, NACKED (with Envoy's error), STALE, PENDING or NOT SENT, its replica and its last ACK's age.

    Exit 3 when POD is connected to no replica, 5 when a replica did not answer (the others are shown)."""
    replicas = _debug_client(session, xds_namespace, xds_urls, ca_file).replicas()
    answers, failures = _ask_all(replicas, "/debug/envoys")
    now = time.time()
    statuses = [
        proxystatus.envoy_status({**envoy, "replica": envoy.get("replica") or replica.name}, now, stale_after)
        for replica, envoys in answers
        for envoy in envoys
    ]
    if pod is not None:
        node = _node_id(pod)
        statuses = [s for s in statuses if s["name"] == node]
        if not statuses and not failures:
            raise CommandError(f"no Envoy {node} is connected to any xds replica", Exit.NOT_FOUND)
    if output in ("json", "yaml"):
        emit(statuses, output)
    elif statuses:
        rows = proxystatus.status_rows(statuses)
        click.echo(render.table(rows, render.columns(proxystatus.STATUS_COLUMNS, output == "wide")))
    elif not failures:
        click.echo("No Envoy is connected.", err=True)
    return _report(failures, partial=bool(answers))


@cli.command("proxy-config")
@click.argument("pod")
@click.argument("kind", type=click.Choice(list(proxystatus.CONFIG_ROWS)))
@xds_options
@output_option("table", "json", "yaml")
@connection_options
@click.pass_obj
def proxy_config(
    session: Session, pod: str, kind: str, xds_namespace: str, xds_urls: tuple[str, ...], ca_file: Path | None,
    output: str,
) -> int:  # fmt: skip
    """The listeners, clusters or endpoints xds last sent POD (NAME.NAMESPACE) and the Envoy did not reject, as a
    table or (-o json|yaml) the resources as sent. Exit 3 when POD is connected to no replica."""
    node = _node_id(pod)
    replicas = _debug_client(session, xds_namespace, xds_urls, ca_file).replicas()
    answers, failures = _ask_all(replicas, f"/debug/envoys/{quote(node)}/sent")
    failures = [f for f in failures if f.code != Exit.NOT_FOUND]
    if not answers:
        if failures:
            return _report(failures, partial=False)
        raise CommandError(f"no Envoy {node} is connected to any xds replica", Exit.NOT_FOUND)
    resources = answers[-1][1].get(kind, [])
    if output in ("json", "yaml"):
        emit(resources, output)
    elif resources:
        rows = proxystatus.CONFIG_ROWS[kind](resources)
        click.echo(render.table(rows, proxystatus.CONFIG_COLUMNS[kind]))
    else:
        click.echo(f"No {kind}.", err=True)
    return _report(failures, partial=True)


@cli.command()
@click.option("--client", "client_only", is_flag=True, help="Only the client's version: do not ask the cluster.")
@output_option("table", "json", "yaml")
@connection_options
@click.pass_obj
def version(session: Session, client_only: bool, output: str) -> None:
    """Print the client's, the API server's and the tollgate services' versions.

    A service's version is its Deployment's app.kubernetes.io/version label, shown with the image its container
    runs and its ready replicas, in every namespace; `not installed` when it has no Deployment."""
    data: JSON = {"clientVersion": metadata.version("tollgate-cli")}
    if output == "table":
        click.echo(f"Client Version: {data['clientVersion']}")
    if not client_only:
        epic = session.epic()
        data["server"] = {"kubernetes": epic.kubernetes_version(), "components": _components(epic)}
    if output == "table":
        if "server" in data:
            click.echo(render.server_version_text(data["server"]))
    else:
        emit(data, output)


def _components(epic: EPICClient) -> list[render.Row]:
    try:
        return render.component_rows(epic.tollgate_deployments())
    except client.ApiException as error:
        if error.status != 403:
            raise
        return [{"component": c, "version": "<unknown: may not list Deployments>"} for c in render.COMPONENTS]


@cli.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    `source <(epicctl completion bash)`; the same as `_EPICCTL_COMPLETE=bash_source epicctl` (zsh_source,
    fish_source)."""
    completer = get_completion_class(shell)
    assert completer is not None  # every choice is a shell click knows
    click.echo(completer(cli, {}, PROG, COMPLETE_VAR).source(), nl=False)


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


if __name__ == "__main__":
    sys.exit(main())
