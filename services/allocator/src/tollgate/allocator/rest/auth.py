"""Who may call the REST API for an account: HTTP Basic against the account's htpasswd Secret `api-users` (key
`auth`, bcrypt, as EPIC's `epicctl create user` writes it), or the account's bearer token (the registration API's).
Both come from watches kept in memory (tollgate.allocator.credentials): a request reads nothing from the API server.

A password checked once is remembered (by the SHA-256 of account, user, password and the stored hash, so a changed
hash forgets it), so a client's steady calls cost no bcrypt; the checks of unknown passwords run `MAX_CHECKS` at a
time on threads, which caps what guessing can take from the service.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tollgate.runtime import htpasswd

log = logging.getLogger("tollgate.allocator.rest.auth")
MAX_REMEMBERED = 4096
MAX_CHECKS = 2
REALM = 'Basic realm="epic", charset="UTF-8"'


class Unauthenticated(Exception):
    """No valid credentials for the account: 401 with WWW-Authenticate."""


class Forbidden(Exception):
    """Valid credentials of another account: 403."""


@dataclass(frozen=True)
class Caller:
    account: str
    user: str  # the htpasswd user, or "token" for the bearer token


UsersReader = Callable[[str], Awaitable[str | None]]
TokenAccounts = Callable[[str], Awaitable[str | None]]


class Authenticator:
    def __init__(self, users_of: UsersReader, account_of_token: TokenAccounts) -> None:
        """`users_of(account)`: the htpasswd text of the account's Secret, None without one. `account_of_token`:
        the account a bearer token stands for."""
        self.users_of = users_of
        self.account_of_token = account_of_token
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._unsupported_logged: set[tuple[str, str]] = set()
        self._checks = asyncio.Semaphore(MAX_CHECKS)

    async def caller(self, authorization: str | None, account: str) -> Caller:
        """The caller the Authorization header names, allowed to act on `account`."""
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            token_account = await self.account_of_token(credentials.strip())
            if token_account is None:
                raise Unauthenticated("authorization: the bearer token is no account's token")
            if token_account != account:
                raise Forbidden(
                    f"account: {account!r} is not the token's account ({token_account!r}); a token acts on its own "
                    "account only"
                )
            return Caller(account, "token")
        if scheme.lower() == "basic" and credentials.strip():
            user, password = _basic(credentials.strip())
            if await self._password_matches(account, user, password):
                return Caller(account, user)
            raise Unauthenticated(f"authorization: no user {user!r} with this password in account {account!r}")
        raise Unauthenticated(
            "authorization: required: HTTP Basic (a user of the account's Secret api-users, `epicctl create user`) "
            "or Bearer (the account's token, `epicctl credentials create`)"
        )

    async def _password_matches(self, account: str, user: str, password: str) -> bool:
        hashed = (await self._account_users(account)).get(user)
        if hashed is None:
            return False
        key = hashlib.sha256("\0".join((account, user, password, hashed)).encode()).digest()
        if key in self._verified:
            self._verified.move_to_end(key)
            return True
        async with self._checks:
            matches = await asyncio.to_thread(htpasswd.verify, hashed, password)
        if matches:
            self._verified[key] = None
            while len(self._verified) > MAX_REMEMBERED:
                self._verified.popitem(last=False)
        return matches

    async def _account_users(self, account: str) -> dict[str, str]:
        try:
            users = htpasswd.parse(await self.users_of(account) or "")
        except ValueError as error:  # closed, not open: a broken Secret lets nobody in
            log.warning("the api-users Secret of account %s cannot be read: %s", account, error)
            return {}
        for user in htpasswd.unsupported(users):
            if (account, user) not in self._unsupported_logged:
                self._unsupported_logged.add((account, user))
                log.warning("account %s: user %s has no bcrypt hash and cannot log in", account, user)
        return users


def _basic(credentials: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthenticated("authorization: Basic credentials are not base64 of UTF-8 user:password") from None
    user, colon, password = decoded.partition(":")
    if not colon or not user:
        raise Unauthenticated("authorization: Basic credentials are not user:password")
    return user, password
