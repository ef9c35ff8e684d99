"""The debug API's access decisions: a token in its own header, reviewed, then authorised; and its settings."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from tollgate.xds.__main__ import Settings
from tollgate.xds.api.auth import AUDIENCE, HEADER, Gatekeeper, User, decide


class Reviews:
    """The API server's answers: `users` by token, and who may read the debug API."""

    def __init__(self, users: dict[str, User], readers: set[str]) -> None:
        self.users = users
        self.readers = readers
        self.calls = 0

    def review_token(self, token: str, audience: str) -> User | str:
        self.calls += 1
        assert audience == AUDIENCE
        return self.users.get(token, "[invalid bearer token, token lookup failed]")

    def may(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        return (verb, path) == ("get", "/tollgate/xds/debug") and user.name in self.readers, ""


REVIEWS = Reviews(
    {"good": User("system:serviceaccount:ops:reader"), "nosy": User("alice")}, {"system:serviceaccount:ops:reader"}
)


def test_a_request_needs_a_token_the_api_server_accepts_whose_user_may_read() -> None:
    missing = decide(None, REVIEWS)
    assert missing.status == 401 and missing.message.startswith(f"the debug API needs a token in the {HEADER} header")
    invalid = decide("forged", REVIEWS)
    assert (invalid.status, invalid.message) == (
        401,
        f"the {HEADER} token is not valid for the audience 'tollgate-xds-debug': [invalid bearer token, token lookup "
        "failed]",
    )
    denied = decide("nosy", REVIEWS)
    assert (denied.status, denied.message) == (403, "user 'alice' may not get the non-resource URL /tollgate/xds/debug")
    assert decide("good", REVIEWS).status == 200


def test_decisions_are_remembered_for_a_while_per_token() -> None:
    now = [0.0]
    reviews = Reviews(REVIEWS.users, REVIEWS.readers)
    gate = Gatekeeper(reviews, ttl=10, clock=lambda: now[0])
    assert gate.check("good").status == 200
    assert gate.check("forged").status == 401
    now[0] = 9
    assert gate.check("good").status == 200 and gate.check("forged").status == 401
    assert reviews.calls == 2
    now[0] = 11
    assert gate.check("good").status == 200
    assert reviews.calls == 3, "reviewed again once the answer is older than the TTL"


def test_the_debug_api_beyond_loopback_needs_auth() -> None:
    message = "api_host: 0.0.0.0 is not a loopback address, so api_auth must be true"
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings(api_host="0.0.0.0")
    assert Settings(api_host="0.0.0.0", api_auth=True).api_auth
    assert not Settings().api_auth, "loopback only, without auth, by default"
