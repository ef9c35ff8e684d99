"""`proxy-status` and `proxy-config`: the Envoys connected to the xds replicas, and what each was sent, from the
replicas' debug APIs (tollgate.cli.xdsdebug)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from tollgate.cli import proxystatus, render
from tollgate.cli.epicctl.common import PROG, Command, Session, connection_options, emit, output_option
from tollgate.cli.exits import CommandError, Exit
from tollgate.cli.xdsdebug import DebugClient, Replica


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


@click.command("proxy-status")
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


@click.command("proxy-config")
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
