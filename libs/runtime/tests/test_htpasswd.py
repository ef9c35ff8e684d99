"""htpasswd text of EPIC's REST API users: reading (comments, duplicates, malformed lines), writing one user without
touching the others, and bcrypt verification of `$2b$` (ours) and `$2y$` (`htpasswd -B`) hashes, with no tool but
the bcrypt package; other hashes never verify and are listed."""

from __future__ import annotations

import pytest

from tollgate.runtime import htpasswd

FAST = 4  # bcrypt's lowest cost: the tests are about the format, not the work factor


@pytest.fixture(scope="module")
def alice() -> str:
    return htpasswd.hash_password("alice-secret", rounds=FAST)


def test_a_hash_is_bcrypt_2b_at_cost_12_by_default_and_verifies_its_password_only() -> None:
    hashed = htpasswd.hash_password("correct horse")
    assert hashed.startswith("$2b$12$")
    assert htpasswd.verify(hashed, "correct horse")
    assert not htpasswd.verify(hashed, "correct horse ")
    assert not htpasswd.verify(hashed, "")


def test_a_2y_hash_as_htpasswd_b_writes_it_verifies_without_any_external_tool(
    alice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`$2y$` (PHP's and Apache's name) and `$2a$` are the same algorithm as `$2b$` for these passwords."""
    monkeypatch.setenv("PATH", "")  # no htpasswd, no openssl
    for prefix in ("$2y$", "$2a$"):
        other = prefix + alice.removeprefix("$2b$")
        assert htpasswd.verify(other, "alice-secret"), prefix
        assert not htpasswd.verify(other, "alice-secreT"), prefix
    text = "alice:" + "$2y$" + alice.removeprefix("$2b$") + "\n"
    assert htpasswd.unsupported(htpasswd.parse(text)) == []


def test_other_hashes_never_verify_and_are_listed_as_unsupported(alice: str) -> None:
    text = (
        f"alice:{alice}\n"
        "sha:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n"  # "password"
        "apr:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\n"
        "crypt:rqXexS6ZhobKA\n"
        "broken:$2b$12$short\n"
        "empty:\n"
    )
    users = htpasswd.parse(text)
    assert htpasswd.unsupported(users) == ["sha", "apr", "crypt", "empty"]
    assert not any(htpasswd.verify(users[u], "password") for u in ("sha", "apr", "crypt", "empty"))
    assert not htpasswd.verify(users["broken"], "password"), "a garbled bcrypt hash is refused, not an error"


def test_reading_skips_blank_lines_and_comments_and_the_first_line_of_a_user_wins(alice: str) -> None:
    text = f"# EPIC API users\r\n\r\n  alice:{alice}  \r\nbob:$2b$04$bob\n\n#carol:x\nalice:$2b$04$later\n"
    assert htpasswd.parse(text) == {"alice": alice, "bob": "$2b$04$bob"}
    assert htpasswd.parse("") == {}


@pytest.mark.parametrize(("text", "line"), [("alice\n", 1), ("# c\nbob:x\n:nouser\n", 3)])
def test_a_line_that_is_not_user_colon_hash_is_an_error_naming_its_number(text: str, line: int) -> None:
    with pytest.raises(ValueError, match=f"^line {line}: not `user:hash`$"):
        htpasswd.parse(text)


def test_setting_a_user_replaces_its_line_in_place_or_adds_it_last_keeping_the_others() -> None:
    text = "# a comment\nalice:$2b$04$a\nbob:$2b$04$b\nalice:$2b$04$dup\n"
    assert htpasswd.with_user(text, "alice", "$2b$04$new") == "alice:$2b$04$new\nbob:$2b$04$b\n"
    assert htpasswd.with_user(text, "carol", "$2b$04$c") == "alice:$2b$04$a\nbob:$2b$04$b\ncarol:$2b$04$c\n"
    assert htpasswd.with_user("", "carol", "$2b$04$c") == "carol:$2b$04$c\n"


def test_removing_a_user_keeps_the_others_and_an_absent_user_changes_nothing() -> None:
    text = "alice:$2b$04$a\nbob:$2b$04$b\n"
    assert htpasswd.without_user(text, "alice") == "bob:$2b$04$b\n"
    assert htpasswd.without_user(text, "carol") == text
    assert htpasswd.without_user("", "carol") == ""
    assert htpasswd.render(htpasswd.parse(text)) == text


@pytest.mark.parametrize(
    ("user", "rule"),
    [("", "must not be empty"), ("a:b", "contains ':'"), ("a\nb:$2b$04$x", "contains ':'"),
     ("a\nb", "whitespace or a control character"), ("a b", "whitespace"), ("a\tb", "whitespace"),
     ("a\x00b", "control character"), ("x" * 256, "256 characters, more than 255")],
)  # fmt: skip
def test_a_username_that_would_break_the_file_or_http_basic_is_refused(user: str, rule: str) -> None:
    with pytest.raises(ValueError, match=r"^username: .*" + rule.replace("(", r"\(")):
        htpasswd.with_user("", user, "$2b$04$x")


def test_usernames_up_to_255_characters_of_any_printable_kind_are_accepted() -> None:
    for user in ("x" * 255, "agent-1.acme@example.com", "zoë"):
        htpasswd.check_username(user)


def test_passwords_beyond_bcrypts_72_bytes_are_refused_and_compared_on_their_first_72_as_htpasswd_does() -> None:
    with pytest.raises(ValueError, match=r"^password: 73 bytes, more than bcrypt's 72$"):
        htpasswd.hash_password("é" + "x" * 71, rounds=FAST)
    hashed = htpasswd.hash_password("x" * 72, rounds=FAST)
    assert htpasswd.verify(hashed, "x" * 72)
    assert htpasswd.verify(hashed, "x" * 80), "a hash htpasswd made of a longer password still verifies"
    assert not htpasswd.verify(hashed, "x" * 71)
