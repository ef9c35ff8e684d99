"""Who may call the REST API for an account: Basic against the account's htpasswd text, or its bearer token; how
often the Secret is read, and that a changed password stops working."""

from __future__ import annotations

import base64

import pytest

from tollgate.allocator.rest.auth import Authenticator, Forbidden, Unauthenticated
from tollgate.runtime import htpasswd

FAST = 4  # bcrypt's lowest cost: the rules are the same


class Secrets:
    """The htpasswd text of each account's Secret api-users."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    async def users_of(self, account: str) -> str | None:
        return self.texts.get(account)

    def set_password(self, account: str, user: str, password: str) -> None:
        hashed = htpasswd.hash_password(password, rounds=FAST)
        self.texts[account] = htpasswd.with_user(self.texts.get(account, ""), user, hashed)


async def token_account(token: str) -> str | None:
    return {"acme-token": "acme"}.get(token)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def secrets() -> Secrets:
    store = Secrets()
    store.set_password("acme", "agent", "password-1")
    return store


async def test_the_accounts_user_and_token_are_let_in_and_nobody_else(secrets: Secrets) -> None:
    auth = Authenticator(secrets.users_of, token_account)
    assert (await auth.caller(basic("agent", "password-1"), "acme")).user == "agent"
    assert (await auth.caller("Bearer acme-token", "acme")).user == "token"
    for header in (basic("agent", "wrong"), basic("nobody", "password-1"), "Bearer other", None, "Digest x", "Basic !"):
        with pytest.raises(Unauthenticated, match=r"^authorization: "):
            await auth.caller(header, "acme")
    with pytest.raises(Unauthenticated):
        await auth.caller(basic("agent", "password-1"), "other")  # a user of one account is none of another's
    with pytest.raises(Forbidden, match=r"^account: 'other' is not the token's account"):
        await auth.caller("Bearer acme-token", "other")


async def test_a_changed_password_stops_working_at_once(secrets: Secrets) -> None:
    auth = Authenticator(secrets.users_of, token_account)
    await auth.caller(basic("agent", "password-1"), "acme")
    secrets.set_password("acme", "agent", "password-2")
    with pytest.raises(Unauthenticated):
        await auth.caller(basic("agent", "password-1"), "acme")
    assert (await auth.caller(basic("agent", "password-2"), "acme")).user == "agent"


async def test_a_broken_secret_lets_nobody_in(secrets: Secrets) -> None:
    secrets.texts["acme"] = "a line without a colon\n"
    auth = Authenticator(secrets.users_of, token_account)
    with pytest.raises(Unauthenticated):
        await auth.caller(basic("agent", "password-1"), "acme")
