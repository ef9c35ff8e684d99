"""htpasswd text, as EPIC keeps an account's REST API users: one `user:hash` a line, the `auth` key of the Secret
`api-users` in its user namespace (tollgate.models.epic.API_USERS_SECRET). epicctl writes it, the allocator checks
HTTP Basic against it; both read it here.

Reading: blank lines and lines starting with `#` are skipped, and surrounding whitespace (a `\\r`) is dropped. A user
listed twice is the first line's (Apache's mod_authn_file stops at the first match). A line without `:` is an error
naming its number. Writing (`render`, `with_user`, `without_user`) keeps the users' order but not comments, blank
lines or a second line of one user.

Only bcrypt is verified: `$2b$` (made here), `$2y$` (`htpasswd -B`) and `$2a$`. Any other hash (`{SHA}`, `$apr1$`,
crypt) never verifies; `unsupported` lists its users, for a reader to log.
"""

from __future__ import annotations

import bcrypt

BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
DEFAULT_ROUNDS = 12
MAX_USERNAME_LENGTH = 255
# bcrypt reads no further: Apache's htpasswd and Go's bcrypt compare only this much of a longer password.
BCRYPT_MAX_BYTES = 72


def check_username(user: str) -> None:
    """Raise ValueError naming the rule `user` breaks: HTTP Basic's user-id has no ':' (RFC 7617), a line holds one
    user, and EPIC's own reader splits the text on whitespace."""
    if not user:
        raise ValueError("username: must not be empty")
    if ":" in user:
        raise ValueError(f"username: {user!r} contains ':', which separates the user from the password")
    if any(c.isspace() or not c.isprintable() for c in user):
        raise ValueError(f"username: {user!r} contains whitespace or a control character (a line break among them)")
    if len(user) > MAX_USERNAME_LENGTH:
        raise ValueError(f"username: {len(user)} characters, more than {MAX_USERNAME_LENGTH}")


def parse(text: str) -> dict[str, str]:
    """Each user's hash, in the order of the text; the first line of a user listed twice."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, hashed = line.partition(":")
        if not colon or not user:
            raise ValueError(f"line {number}: not `user:hash`")
        users.setdefault(user, hashed)
    return users


def render(users: dict[str, str]) -> str:
    return "".join(f"{user}:{hashed}\n" for user, hashed in users.items())


def with_user(text: str, user: str, hashed: str) -> str:
    """`text` with `user`'s line set to `hashed`: in its place when listed, else last."""
    check_username(user)
    return render({**parse(text), user: hashed})


def without_user(text: str, user: str) -> str:
    return render({u: h for u, h in parse(text).items() if u != user})


def is_bcrypt(hashed: str) -> bool:
    return hashed.startswith(BCRYPT_PREFIXES)


def unsupported(users: dict[str, str]) -> list[str]:
    """The users whose hash is not bcrypt: `verify` refuses them whatever the password."""
    return [user for user, hashed in users.items() if not is_bcrypt(hashed)]


def hash_password(password: str, rounds: int = DEFAULT_ROUNDS) -> str:
    """A `$2b$` bcrypt hash of `password`; ValueError beyond BCRYPT_MAX_BYTES, which bcrypt would not read."""
    encoded = password.encode()
    if len(encoded) > BCRYPT_MAX_BYTES:
        raise ValueError(f"password: {len(encoded)} bytes, more than bcrypt's {BCRYPT_MAX_BYTES}")
    return bcrypt.hashpw(encoded, bcrypt.gensalt(rounds)).decode()


def verify(hashed: str, password: str) -> bool:
    """Whether `password` matches a bcrypt `hashed`; False for any other or malformed hash."""
    if not is_bcrypt(hashed):
        return False
    try:
        return bcrypt.checkpw(password.encode()[:BCRYPT_MAX_BYTES], hashed.encode())
    except ValueError:  # a truncated or garbled hash ("Invalid salt")
        return False
