"""The few API calls epicctl makes."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tollgate.cli.exits import CommandError, Exit
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    NAMESPACE_CREATED_FOR,
    USER_NAMESPACE_LABEL,
    Account,
    AccountSpec,
    LoadBalancer,
    RemoteEndpoint,
    account_namespace,
    account_of,
)

JSON = dict[str, Any]
PART_OF = "app.kubernetes.io/part-of=tollgate"


class EPICClient:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def _list(self, kind: Any, namespace: str | None) -> list[JSON]:
        info = kind.resource
        result: JSON
        if namespace is None:
            result = self.custom.list_cluster_custom_object(info.group, info.version, info.plural)  # type: ignore[assignment]
        else:
            result = self.custom.list_namespaced_custom_object(  # type: ignore[assignment]
                info.group, info.version, namespace, info.plural
            )
        items: list[JSON] = result["items"]
        return sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    def create_user_namespace(self, name: str) -> JSON:
        namespace = account_namespace(name)
        labels = {USER_NAMESPACE_LABEL: "true", ACCOUNT_LABEL: name}
        try:
            metadata = client.V1ObjectMeta(name=namespace, labels=labels, annotations={NAMESPACE_CREATED_FOR: name})
            self.core.create_namespace(client.V1Namespace(metadata=metadata))
        except client.ApiException as error:
            if error.status == 409:
                raise CommandError(f"user namespace {namespace} already exists", Exit.CONFLICT) from None
            raise
        body = Account.new(name, AccountSpec(), namespace=namespace).to_wire()
        info = Account.resource
        created: JSON = self.custom.create_namespaced_custom_object(  # type: ignore[assignment]
            info.group, info.version, namespace, info.plural, body
        )
        return created

    def accounts(self) -> list[JSON]:
        return self._list(Account, None)

    def load_balancers(self, account: str | None) -> list[JSON]:
        return self._list(LoadBalancer, account_namespace(account) if account else None)

    def endpoints(self, account: str | None) -> list[JSON]:
        return self._list(RemoteEndpoint, account_namespace(account) if account else None)

    def load_balancer(self, account: str | None, name: str) -> JSON:
        candidates = [lb for lb in self.load_balancers(account) if lb["metadata"]["name"] == name]
        if not candidates:
            where = f" in account {account}" if account else ""
            raise CommandError(f"load balancer {name!r} not found{where}", Exit.NOT_FOUND)
        if len(candidates) > 1:
            owners = ", ".join(account_of(lb["metadata"]["namespace"]) for lb in candidates)
            raise CommandError(
                f"load balancer {name!r} exists in several accounts ({owners}): pick one with -a", Exit.USAGE
            )
        return candidates[0]

    def events(self, obj: JSON) -> list[JSON]:
        meta = obj["metadata"]
        selector = f"involvedObject.uid={meta['uid']}"
        listed = self.core.list_namespaced_event(meta["namespace"], field_selector=selector)
        events: list[JSON] = self.api.sanitize_for_serialization(listed.items)  # type: ignore[no-untyped-call]
        return sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def kubernetes_version(self) -> str:
        """The API server's version, as `kubectl version` reports it (`gitVersion` of /version)."""
        info = client.VersionApi(self.api).get_code()
        return str(info.git_version)

    def tollgate_deployments(self) -> list[JSON]:
        """The Deployments of tollgate's charts, in every namespace (label app.kubernetes.io/part-of=tollgate)."""
        listed = client.AppsV1Api(self.api).list_deployment_for_all_namespaces(label_selector=PART_OF)
        deployments: list[JSON] = self.api.sanitize_for_serialization(listed.items)  # type: ignore[no-untyped-call]
        return deployments
