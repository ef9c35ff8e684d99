"""How epicctl reads the xds replicas' debug APIs: through the API server, with a token it mints.

Every replica is asked (a Service would pick one): the pods labelled `app.kubernetes.io/name=tollgate-xds` in the
xds namespace, each through the pods proxy subresource, `/api/v1/namespaces/<ns>/pods/https:<pod>:<port>/proxy/...`,
so epicctl needs no network path to the pods, only `get pods/proxy` there. The API server deletes the caller's
`Authorization` header before proxying, so the debug API's own token goes in `X-Tollgate-Debug-Token`: minted with
the TokenRequest API for the chart's ServiceAccount `tollgate-xds-debug` and the audience `tollgate-xds-debug`
(`create serviceaccounts/token` on that name), valid for ten minutes, never stored.

`--xds-url` names debug APIs directly instead (a replica outside the cluster, as `make dev` runs it).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes import client

from tollgate.cli.exits import CommandError, Exit, api_message
from tollgate.models.envoy import DEBUG_AUDIENCE, DEBUG_SERVICE_ACCOUNT, DEBUG_TOKEN_HEADER

XDS_SELECTOR = "app.kubernetes.io/name=tollgate-xds"
DEBUG_PORT_NAME = "debug"
DEFAULT_DEBUG_PORT = 8081
TOKEN_SECONDS = 600
TIMEOUT = 10.0
JSON = dict[str, Any]


@dataclass(frozen=True)
class Replica:
    """One xds replica's debug API: `name` for messages, `get(path)` its JSON answer."""

    name: str
    get: Callable[[str], Any]


# A pod that refuses its debug port: the xds chart serves the debug API on the pod's loopback unless told otherwise.
REFUSED_HINT = (
    "; the debug API listens on the pod's loopback unless the xds chart sets debugApi.service=true "
    "(or: kubectl port-forward to it, then --xds-url)"
)


def _refusal(status: int, body: str, where: str) -> CommandError:
    """The debug API's own refusal (FastAPI's `detail`), else the API server's (a Status `message`)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    detail = parsed.get("detail") if isinstance(parsed, dict) else None
    if detail is not None:
        codes = {401: Exit.DENIED, 403: Exit.DENIED, 404: Exit.NOT_FOUND}
        return CommandError(f"{where}: the debug API refused ({status}): {detail}", codes.get(status, Exit.ERROR))
    message = parsed.get("message", body) if isinstance(parsed, dict) else body
    if status in (502, 503, 504) or "address not allowed" in str(message):
        hint = REFUSED_HINT if "connection refused" in str(message) else ""
        return CommandError(
            f"{where}: unreachable through the API server ({status}): {message}{hint}", Exit.UNREACHABLE
        )
    codes = {401: Exit.DENIED, 403: Exit.DENIED, 404: Exit.NOT_FOUND}
    return CommandError(f"{where}: the API server refused ({status}): {message}", codes.get(status, Exit.ERROR))


class DebugClient:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        urls: tuple[str, ...] = (),
        ca_file: Path | None = None,
        service_account: str = DEBUG_SERVICE_ACCOUNT,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.urls = urls
        self.ca_file = ca_file
        self.service_account = service_account
        self._token: str | None = None
        self._minted = False

    def token(self) -> str | None:
        """A token for the debug API, minted once; None when the ServiceAccount does not exist (a debug API on
        loopback, without auth, needs none; one with auth then says what it wants)."""
        if not self._minted:
            body = {"spec": {"audiences": [DEBUG_AUDIENCE], "expirationSeconds": TOKEN_SECONDS}}
            try:
                minted = self.core.create_namespaced_service_account_token(
                    self.service_account,
                    self.namespace,
                    body,  # type: ignore[arg-type]
                )
            except client.ApiException as error:
                if error.status != 404:
                    where = f"serviceaccount {self.namespace}/{self.service_account}"
                    raise CommandError(
                        f"cannot mint a debug token for {where} (create serviceaccounts/token): {api_message(error)}",
                        Exit.DENIED if error.status in (401, 403) else Exit.ERROR,
                    ) from None
            else:
                self._token = str(minted.status.token) if minted.status else None
            self._minted = True
        return self._token

    def _headers(self) -> dict[str, str]:
        token = self.token()
        return {DEBUG_TOKEN_HEADER: token, "Accept": "application/json"} if token else {"Accept": "application/json"}

    def replicas(self) -> list[Replica]:
        if self.urls:
            return [Replica(url, self._direct(url)) for url in self.urls]
        listed = self.core.list_namespaced_pod(self.namespace, label_selector=XDS_SELECTOR)
        pods: list[JSON] = self.api.sanitize_for_serialization(listed.items)  # type: ignore[no-untyped-call]
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if not running:
            raise CommandError(
                f"no running tollgate-xds pod in namespace {self.namespace} (label {XDS_SELECTOR}): "
                "pick the namespace with --xds-namespace, or name debug APIs with --xds-url",
                Exit.NOT_FOUND,
            )
        return [Replica(f"{self.namespace}/{p['metadata']['name']}", self._proxied(p)) for p in running]

    def _proxied(self, pod: JSON) -> Callable[[str], Any]:
        name = pod["metadata"]["name"]
        ports = [p for c in pod["spec"]["containers"] for p in c.get("ports") or [] if p.get("name") == DEBUG_PORT_NAME]
        port = ports[0]["containerPort"] if ports else DEFAULT_DEBUG_PORT
        target = f"https:{name}:{port}"
        base = f"/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(target)}/proxy"
        where = f"xds {self.namespace}/{name}"

        def get(path: str) -> Any:
            method, url, headers, body, post = self.api.param_serialize(
                "GET", base + path, header_params=self._headers(), auth_settings=["BearerToken"]
            )
            try:
                response = self.api.call_api(method, url, headers, body, post, _request_timeout=TIMEOUT)
                response.read()  # type: ignore[no-untyped-call]
            except OSError as error:
                raise CommandError(f"{where}: the API server is unreachable: {error}", Exit.UNREACHABLE) from None
            text = bytes(response.data or b"").decode(errors="replace")
            if not 200 <= response.status < 300:
                raise _refusal(response.status, text, where)
            return json.loads(text)

        return get

    def _direct(self, base: str) -> Callable[[str], Any]:
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        where = f"xds {base}"

        def get(path: str) -> Any:
            request = urllib.request.Request(base.rstrip("/") + path, headers=self._headers())
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
                    return json.load(response)
            except urllib.error.HTTPError as error:
                raise _refusal(error.code, error.read().decode(errors="replace"), where) from None
            except (urllib.error.URLError, OSError) as error:
                reason = getattr(error, "reason", error)
                raise CommandError(f"{where}: unreachable: {reason}", Exit.UNREACHABLE) from None

        return get
