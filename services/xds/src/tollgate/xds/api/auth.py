"""Who may read the debug API when it is served beyond loopback: a Kubernetes token in its own header.

The API server's proxy (`pods/<pod>:<port>/proxy`) deletes the `Authorization` header once it has authenticated the
caller, so the caller's own credentials never reach the pod. The caller therefore sends a second token, in
`X-Tollgate-Debug-Token`: a ServiceAccount token minted for the audience `tollgate-xds-debug` (epicctl mints one
with the TokenRequest API). The debug API asks the API server who the token is (TokenReview, that audience only:
a token minted for anything else is refused) and whether that user may `get` the non-resource URL
`/tollgate/xds/debug` (SubjectAccessReview). Answers are remembered for `ttl` seconds per token.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tollgate.models.envoy import DEBUG_AUDIENCE, DEBUG_PERMISSION_URL, DEBUG_TOKEN_HEADER

HEADER = DEBUG_TOKEN_HEADER
AUDIENCE = DEBUG_AUDIENCE
# The permission a token's user needs: `get` on this non-resource URL (a ClusterRole rule `nonResourceURLs`).
PERMISSION_URL = DEBUG_PERMISSION_URL
PERMISSION_VERB = "get"


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """The answer to one request: `status` 200, 401 or 403, and why."""

    status: int
    message: str = ""
    user: str = ""


class Reviewer(Protocol):
    """The two API calls a decision needs (tollgate.xds.k8s.Kube implements them)."""

    def review_token(self, token: str, audience: str) -> User | str:
        """The token's user, else why the API server does not authenticate it."""

    def may(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        """Whether `user` may `verb` the non-resource URL `path`, and the authorizer's reason."""


def decide(token: str | None, reviewer: Reviewer) -> Decision:
    """Authenticate then authorise one request's token (pure but for the reviewer's two calls)."""
    if not token:
        return Decision(
            401,
            f"the debug API needs a token in the {HEADER} header: a ServiceAccount token for the audience "
            f"{AUDIENCE!r} (epicctl proxy-status mints one)",
        )
    user = reviewer.review_token(token, AUDIENCE)
    if isinstance(user, str):
        return Decision(401, f"the {HEADER} token is not valid for the audience {AUDIENCE!r}: {user}")
    allowed, reason = reviewer.may(user, PERMISSION_VERB, PERMISSION_URL)
    if not allowed:
        why = f" ({reason})" if reason else ""
        return Decision(
            403, f"user {user.name!r} may not {PERMISSION_VERB} the non-resource URL {PERMISSION_URL}{why}", user.name
        )
    return Decision(200, user=user.name)


class Gatekeeper:
    """`decide`, remembering each token's decision for `ttl` seconds (a refusal too: a flood costs no reviews)."""

    def __init__(self, reviewer: Reviewer, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.reviewer = reviewer
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, Decision]] = {}

    def check(self, token: str | None) -> Decision:
        if not token:
            return decide(token, self.reviewer)
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        decision = decide(token, self.reviewer)
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.ttl}
        self._cache[key] = (now, decision)
        return decision
