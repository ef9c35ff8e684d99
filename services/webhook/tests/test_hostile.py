"""Hostile or broken requests over real HTTPS: oversized and endless bodies get a 413 before they are read in
full, malformed and deeply nested JSON a 400, never a 5xx; exempt reviews are answered without the cache."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tollgate.webhook.admission import MAX_DEPTH
from tollgate.webhook.api.app import MAX_REQUEST_BYTES
from tollgate.webhook.cache import store_for
from tollgate.webhook.validation import INDEXES

Obj = dict[str, Any]
Sample = Callable[[str], Obj]
MakeReview = Callable[..., Obj]
GOOPS = "/validate/goop.example.com/v1alpha1/goops"


def _exchange(server: Any, head: bytes, body: bytes) -> tuple[int, Obj]:
    """Send the request line and headers, then `body` (which may be less than they announce), and read the answer
    without closing the sending side: a server that waits for the rest of the body times the client out."""
    context = server.client_context()
    with (
        socket.create_connection(("127.0.0.1", server.server.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 62


def _head(path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_body_announced_over_the_limit_gets_a_413_before_it_is_sent(server: Any) -> None:
    """Only the headers arrive: the answer comes from the Content-Length alone (the old code waited for the body)."""
    status, answer = _exchange(server, _head(GOOPS, f"Content-Length: {MAX_REQUEST_BYTES + 1}"), b"")
    assert status == 413
    assert answer["reason"] == "RequestEntityTooLarge"
    assert f"over {MAX_REQUEST_BYTES} bytes" in answer["message"]
    assert "TOLLGATE_WEBHOOK_MAX_REQUEST_BYTES" in answer["message"]


def test_a_chunked_body_is_cut_off_at_the_limit_with_a_413(server: Any) -> None:
    """No Content-Length: the server stops at the limit rather than buffering an endless body (never terminated
    here, so a server that read it to the end would never answer)."""
    chunk = b"x" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_REQUEST_BYTES // len(chunk) + 1))
    status, answer = _exchange(server, _head(GOOPS, "Transfer-Encoding: chunked"), chunks)
    assert (status, answer["code"]) == (413, 413)


def test_a_review_under_the_limit_is_still_decided(server: Any, sample: Sample, make_review: MakeReview) -> None:
    goop = sample("Goop")
    goop["metadata"]["annotations"] = {"padding": "x" * (MAX_REQUEST_BYTES - 64 * 1024)}
    status, answer = server.post(GOOPS, json.dumps(make_review(goop)).encode())
    assert (status, answer["response"]["allowed"]) == (200, True)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="past-the-parser's-recursion-limit"),
        pytest.param(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, id="objects-past-the-recursion-limit"),
    ],
)
def test_json_nested_past_the_parsers_limit_gets_a_400(server: Any, body: bytes) -> None:
    status, answer = server.post(GOOPS, body)
    assert status == 400
    assert answer["message"] == f"the body nests deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize("operation", ["mutate", "validate"])
def test_a_review_whose_object_nests_too_deep_gets_a_400(
    server: Any, sample: Sample, make_review: MakeReview, operation: str
) -> None:
    """Parseable, but deeper than any object of a tollgate kind: refused before the rules' recursive walks."""
    goop = sample("Goop")
    goop["spec"]["extra"] = _nested(500)
    status, answer = server.post(
        f"/{operation}/goop.example.com/v1alpha1/goops", json.dumps(make_review(goop)).encode()
    )
    assert status == 400
    assert answer["message"] == f"the body nests deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize(
    "body", [b"\xff\xfe", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": [1]}', b""]
)
def test_malformed_bodies_get_a_400(server: Any, body: bytes) -> None:
    status, answer = server.post(GOOPS, body)
    assert (status, answer["code"]) == (400, 400)


def test_metadata_only_changes_and_deletions_are_answered_before_the_cache_is_listed(
    start_server: Callable[..., Any], bundle_dir: Path, sample: Sample, make_review: MakeReview
) -> None:
    """An operator removing its finalizer while the webhook restarts (its cache not listed yet) is never refused."""
    unsynced = start_server(bundle_dir, store=store_for(INDEXES))
    old = sample("LoadBalancer")
    new = sample("LoadBalancer")
    old["metadata"]["finalizers"] = ["epic.acnodal.io/allocator"]
    deleting = {**new, "metadata": {**new["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    path = "/validate/epic.acnodal.io/v1/loadbalancers"
    for review in (
        make_review(new, "UPDATE", old=old),
        make_review(deleting, "UPDATE", old=old),
        make_review(None, "DELETE", old=old),
    ):
        status, answer = unsynced.post(path, json.dumps(review).encode())
        assert (status, answer["response"]["allowed"]) == (200, True), answer
    status, answer = unsynced.post(path, json.dumps(make_review(new)).encode())
    assert answer["response"]["status"]["code"] == 503, "a create does wait for the cache"


def test_a_caller_gone_mid_body_is_no_error(
    server: Any, sample: Sample, make_review: MakeReview, caplog: pytest.LogCaptureFixture
) -> None:
    """The API server gave up (its timeout) while the body was arriving: nothing to answer, nothing logged as an
    error, and the next review is decided."""
    context = server.client_context()
    with (
        socket.create_connection(("127.0.0.1", server.server.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(_head(GOOPS, "Content-Length: 1000") + b'{"apiVersion"')
    status, answer = server.post(GOOPS, json.dumps(make_review(sample("Goop"))).encode())
    assert (status, answer["response"]["allowed"]) == (200, True)
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
