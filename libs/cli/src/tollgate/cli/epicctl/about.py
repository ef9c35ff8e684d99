"""`version` and `completion`: the versions of epicctl, the API server and the tollgate services, and the shell
completion script."""

from __future__ import annotations

from importlib import metadata

import click
from click.shell_completion import get_completion_class
from kubernetes import client

from tollgate.cli import render
from tollgate.cli.api import EPICClient
from tollgate.cli.epicctl.common import COMPLETE_VAR, JSON, PROG, Session, cli, connection_options, emit, output_option

SHELLS = ("bash", "zsh", "fish")


@click.command()
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


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    `source <(epicctl completion bash)`; the same as `_EPICCTL_COMPLETE=bash_source epicctl` (zsh_source,
    fish_source)."""
    completer = get_completion_class(shell)
    assert completer is not None  # every choice is a shell click knows
    click.echo(completer(cli, {}, PROG, COMPLETE_VAR).source(), nl=False)
