"""A client of EPIC's REST API written from what EPIC's agents do (../shared/notes/epic-rest.md): the base URL
`https://host:port/api/epic/accounts/{account}/groups/{group}`, HTTP Basic (or a bearer token) over TLS, a POST
answered 302 and followed with a GET, a 409 followed to its Location, `link` objects to find the next URL.

Each call returns the raw `Reply` too, so that a test can check the status codes and headers the agents rely on.
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass, field
from http.client import HTTPSConnection
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: Any
    raw: bytes = field(repr=False, default=b"")

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    @property
    def error(self) -> str:
        return str(self.body.get("error", "")) if isinstance(self.body, dict) else ""


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bearer(token: str) -> str:
    return f"Bearer {token}"


class EpicREST:
    def __init__(self, address: str, ca_file: Path, authorization: str | None) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host, int(port)
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.context.check_hostname = False  # the test certificate names localhost, the tests dial 127.0.0.1
        self.authorization = authorization

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        connection = HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            sent = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            all_headers = {"Content-Type": "application/json", **(headers or {})}
            if self.authorization:
                all_headers["Authorization"] = self.authorization
            connection.request(method, path, body=sent, headers=all_headers)
            response = connection.getresponse()
            data = response.read()
            answer_headers = {k.lower(): v for k, v in response.getheaders()}
        finally:
            connection.close()
        decoded = json.loads(data) if answer_headers.get("content-type") == "application/json" and data else None
        return Reply(response.status, answer_headers, decoded, data)

    def get(self, path: str) -> Reply:
        return self.call("GET", path)

    def post_and_follow(self, path: str, body: Any) -> tuple[Reply, Reply]:
        """POST as an agent does: a 302 (or a 409, the object exists) is followed with a GET of its Location."""
        posted = self.call("POST", path, body)
        if posted.status in (302, 409) and posted.location:
            return posted, self.get(posted.location)
        return posted, posted

    def put_and_follow(self, path: str, body: Any) -> tuple[Reply, Reply]:
        put = self.call("PUT", path, body)
        return put, (self.get(put.location) if put.status == 302 and put.location else put)

    def delete(self, path: str) -> Reply:
        return self.call("DELETE", path)


def base_path(account: str) -> str:
    return f"/api/epic/accounts/{account}"
