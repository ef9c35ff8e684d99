"""epicctl's exit codes, one per kind of failure a script may want to tell apart, and the one-line message of each
failure. docs/allocator.md lists the same table (a test keeps the two in step)."""

from __future__ import annotations

import contextlib
import json
from enum import IntEnum

import urllib3
from kubernetes import client

from tollgate.cli.kubeconfig import KubeconfigError


class Exit(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    CONFLICT = 4
    UNREACHABLE = 5
    DENIED = 6
    INVALID = 7
    CONFIG = 8
    INTERRUPTED = 130


MEANINGS = {
    Exit.OK: "done",
    Exit.ERROR: "any other failure (the API server answered with an error not listed below)",
    Exit.USAGE: "bad command line: unknown command or flag, missing argument, a value not among the choices",
    Exit.NOT_FOUND: "the object (load balancer, account, namespace, connected Envoy, xds pod) does not exist",
    Exit.CONFLICT: "the object already exists, or changed while it was being written",
    Exit.UNREACHABLE: "the API server, or an xds replica's debug API, did not answer: connection refused, timed out, "
    "TLS failure",
    Exit.DENIED: "the API server or the xds debug API did not accept the credentials (401) or refused the request "
    "(403)",
    Exit.INVALID: "the API server or the admission webhook refused the object as invalid (400, 422)",
    Exit.CONFIG: "no usable kubeconfig: a missing or unreadable file, an unknown context, nowhere to look",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
}

STATUS_EXITS = {404: Exit.NOT_FOUND, 409: Exit.CONFLICT, 401: Exit.DENIED, 403: Exit.DENIED, 400: Exit.INVALID,
                422: Exit.INVALID}  # fmt: skip


class CommandError(Exception):
    """A failure the user can act on; printed as one line, its exit code `code`."""

    def __init__(self, message: str, code: Exit = Exit.ERROR) -> None:
        super().__init__(message)
        self.code = code


def api_message(error: client.ApiException) -> str:
    """The API server's own message (a Status object's `message`), else the HTTP reason."""
    reason = str(error.reason)
    if error.body:
        with contextlib.suppress(ValueError, AttributeError):
            reason = json.loads(error.body).get("message", reason)
    return reason


def classify(error: Exception) -> tuple[Exit, str]:
    """The exit code and the one line to print for a failure."""
    if isinstance(error, CommandError):
        return error.code, str(error)
    if isinstance(error, KubeconfigError):
        return Exit.CONFIG, str(error)
    if isinstance(error, client.ApiException):
        code = STATUS_EXITS.get(error.status or 0, Exit.ERROR)
        return code, f"the API server refused ({error.status}): {api_message(error)}"
    if isinstance(error, urllib3.exceptions.HTTPError | OSError):
        cause = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) else error
        return Exit.UNREACHABLE, f"the API server is unreachable: {cause}"
    return Exit.ERROR, f"{type(error).__name__}: {error}"
