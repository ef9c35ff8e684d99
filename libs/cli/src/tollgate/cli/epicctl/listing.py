"""`get` and `describe`: accounts, load balancers, tunnels and endpoints, listed or shown one at a time."""

from __future__ import annotations

import click

from tollgate.cli import render
from tollgate.cli.epicctl.common import (
    AliasedGroup,
    Session,
    account_option,
    connection_options,
    emit,
    output_option,
    show,
    show_list,
)
from tollgate.models.epic import Account, LoadBalancer, RemoteEndpoint

LIST_OUTPUTS = ("table", "wide", "json", "yaml", "name")
GET_ALIASES = {
    "account": "accounts", "acct": "accounts",
    "loadbalancer": "loadbalancers", "lb": "loadbalancers", "lbs": "loadbalancers",
    "tunnel": "tunnels",
    "endpoint": "endpoints", "remoteendpoints": "endpoints", "rep": "endpoints",
}  # fmt: skip


@click.group(cls=AliasedGroup, aliases=GET_ALIASES)
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


@click.group(cls=AliasedGroup, aliases={"loadbalancer": "lb"})
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
