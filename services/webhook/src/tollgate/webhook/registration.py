"""The Mutating- and ValidatingWebhookConfiguration objects that register this webhook for every kind.

Used by the CLI (`python -m tollgate.webhook.cli configurations`), `make dev`, the Helm chart and the tests.
The webhook is reached either by URL (a process on the API server's machine) or through a Service.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from tollgate.webhook.kinds import KINDS, Kind, Operation
from tollgate.webhook.validation import DELETION_RULES

DEFAULT_NAME = "tollgate-webhook"
TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class ServiceReference:
    namespace: str
    name: str
    port: int = 443


@dataclass(frozen=True)
class Registration:
    """Where the webhook listens and which objects it admits.

    `url` is the base URL (`https://127.0.0.1:9443`); otherwise `service`. `object_selector` and
    `namespace_selector` (label selectors, `{"matchLabels": {...}}`) narrow what it admits.
    """

    ca_bundle: bytes
    url: str | None = None
    service: ServiceReference | None = None
    name: str = DEFAULT_NAME
    object_selector: dict[str, Any] = field(default_factory=dict)
    namespace_selector: dict[str, Any] = field(default_factory=dict)
    timeout_seconds: int = TIMEOUT_SECONDS
    labels: dict[str, str] = field(default_factory=lambda: {"app.kubernetes.io/part-of": "tollgate"})

    def __post_init__(self) -> None:
        if (self.url is None) == (self.service is None):
            raise ValueError("give exactly one of url and service")
        if not 1 <= self.timeout_seconds <= 30:
            raise ValueError("timeout_seconds must be within 1 and 30 (the API server's limits)")

    def client_config(self, kind: Kind, operation: Operation) -> dict[str, Any]:
        config: dict[str, Any] = {"caBundle": base64.b64encode(self.ca_bundle).decode()}
        if self.url is not None:
            config["url"] = self.url.rstrip("/") + kind.path(operation)
        else:
            assert self.service is not None
            config["service"] = {
                "namespace": self.service.namespace,
                "name": self.service.name,
                "port": self.service.port,
                "path": kind.path(operation),
            }
        return config

    def webhook(self, kind: Kind, operation: Operation) -> dict[str, Any]:
        # Deletions reach the webhook only for the kinds whose deletion a rule guards (the EPIC singleton).
        guarded = operation == "validate" and kind.model in DELETION_RULES
        operations = ["CREATE", "UPDATE", "DELETE"] if guarded else ["CREATE", "UPDATE"]
        hook: dict[str, Any] = {
            "name": kind.webhook_name(operation),
            "admissionReviewVersions": ["v1"],
            "clientConfig": self.client_config(kind, operation),
            "rules": [
                {
                    "apiGroups": [kind.group],
                    "apiVersions": [kind.version],
                    "operations": operations,
                    "resources": [kind.plural],
                    "scope": "Cluster" if kind.cluster_scoped else "Namespaced",
                }
            ],
            "sideEffects": "None",
            "timeoutSeconds": self.timeout_seconds,
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "objectSelector": self.object_selector,
            "namespaceSelector": self.namespace_selector,
        }
        if operation == "mutate":
            hook["reinvocationPolicy"] = "Never"
        return hook

    def _configuration(self, kind_name: str, operation: Operation) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind_name,
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "webhooks": [self.webhook(kind, operation) for kind in KINDS],
        }

    def mutating(self) -> dict[str, Any]:
        return self._configuration("MutatingWebhookConfiguration", "mutate")

    def validating(self) -> dict[str, Any]:
        return self._configuration("ValidatingWebhookConfiguration", "validate")

    def configurations(self) -> list[dict[str, Any]]:
        return [self.mutating(), self.validating()]
