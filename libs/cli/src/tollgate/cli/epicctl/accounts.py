"""An account's user namespace, its REST API users and its agent credentials: `create user-namespace`,
`create|delete user`, `credentials create|rotate`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import click

from tollgate.cli import apiusers
from tollgate.cli import credentials as agent_credentials
from tollgate.cli.epicctl.common import (
    AliasedGroup,
    Command,
    Session,
    account_option,
    connection_options,
    output_option,
    show,
)
from tollgate.models.epic import Account, account_namespace
from tollgate.runtime import htpasswd

# EPIC's epicctl names the command `api-user` (aliases `api-users`).
USER_ALIASES = {"api-user": "user", "api-users": "user"}


@click.group(cls=AliasedGroup, aliases=USER_ALIASES)
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


@click.group(cls=AliasedGroup, aliases=USER_ALIASES)
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


@click.group()
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
