"""`epicctl`: user namespaces, accounts, load balancers and tunnels of an EPIC system.

    epicctl create user-namespace NAME
    epicctl get accounts
    epicctl get loadbalancers [-n ACCOUNT]
    epicctl get tunnels [-n ACCOUNT]
    epicctl get endpoints [-n ACCOUNT]
    epicctl describe lb NAME [-n ACCOUNT]

Every command takes `-o table|json|yaml` and `--kubeconfig`. Errors print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tollgate.models.base import condition_status, parse_rfc3339
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
from tollgate.runtime.kube import api_client

JSON = dict[str, Any]
Row = dict[str, str]


class CommandError(Exception):
    """A failure the user can act on; printed as one line."""


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's compact age: 42s, 7m, 3h, 12d."""
    then = parse_rfc3339(timestamp)
    if then is None:
        return "<unknown>"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(rows: Sequence[Row], columns: Sequence[str]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    widths = {c: max([len(c), *(len(r.get(c, "")) for r in rows)]) for c in columns}
    lines = ["   ".join(c.upper().ljust(widths[c]) for c in columns).rstrip()]
    lines += ["   ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def account_rows(accounts: list[JSON]) -> list[Row]:
    return [
        {
            "name": a["metadata"]["name"],
            "namespace": a["metadata"]["namespace"],
            "ready": condition_status(a, "Ready"),
            "age": age(a["metadata"].get("creationTimestamp")),
        }
        for a in accounts
    ]


def lb_rows(lbs: list[JSON]) -> list[Row]:
    rows = []
    for lb in lbs:
        spec, status = lb.get("spec") or {}, lb.get("status") or {}
        ports = ",".join(f"{p['port']}/{p.get('protocol', 'TCP')}" for p in spec.get("public-ports") or [])
        rows.append(
            {
                "account": account_of(lb["metadata"]["namespace"]),
                "name": lb["metadata"]["name"],
                "service-id": str(spec.get("service-id", "")),
                "address": str(spec.get("public-address", "")),
                "ports": ports,
                "group": str(spec.get("service-group", "")),
                "tunnels": str(len(status.get("gue-tunnel-endpoints") or {})),
                "ready": condition_status(lb, "Ready"),
                "age": age(lb["metadata"].get("creationTimestamp")),
            }
        )
    return rows


def tunnel_rows(lbs: list[JSON]) -> list[Row]:
    rows = []
    for lb in lbs:
        for node, entry in sorted(((lb.get("status") or {}).get("gue-tunnel-endpoints") or {}).items()):
            port = entry.get("epic-port") or {}
            rows.append(
                {
                    "account": account_of(lb["metadata"]["namespace"]),
                    "load-balancer": lb["metadata"]["name"],
                    "node": node,
                    "tunnel-id": str(entry.get("tunnel-id", "")),
                    "epic-address": str(entry.get("epic-address", "")),
                    "epic-port": f"{port.get('port', '')}/{port.get('protocol', '')}",
                }
            )
    return sorted(rows, key=lambda r: int(r["tunnel-id"] or 0))


def endpoint_rows(reps: list[JSON]) -> list[Row]:
    rows = []
    for rep in reps:
        spec, status = rep.get("spec") or {}, rep.get("status") or {}
        port = spec.get("port") or {}
        rows.append(
            {
                "account": account_of(rep["metadata"]["namespace"]),
                "load-balancer": str(spec.get("load-balancer", "")),
                "name": rep["metadata"]["name"],
                "endpoint": f"{spec.get('address', '')}:{port.get('port', '')}/{port.get('protocol', 'TCP')}",
                "port-name": str(port.get("name") or ""),
                "node": str(spec.get("node-address") or "<ad hoc>"),
                "tunnel-id": str(status.get("tunnel-id", "")),
                "ready": condition_status(rep, "Ready"),
            }
        )
    return rows


def describe_lb(lb: JSON, events: list[JSON]) -> str:
    meta, spec, status = lb["metadata"], lb.get("spec") or {}, lb.get("status") or {}
    lines = [
        f"Name:            {meta['name']}",
        f"Account:         {account_of(meta['namespace'])}",
        f"Namespace:       {meta['namespace']}",
        f"Service ID:      {spec.get('service-id', '<none>')}",
        f"Public address:  {spec.get('public-address', '<none>')}",
        f"Service group:   {spec.get('service-group', '')}",
        "Public ports:",
    ]
    for port in spec.get("public-ports") or []:
        lines.append(f"  {port['port']}/{port.get('protocol', 'TCP')} -> {port.get('targetPort', port['port'])}")
    lines.append("Conditions:")
    conditions = status.get("conditions") or []
    rows = [{k: str(c.get(k, "")) for k in ("type", "status", "reason", "message")} for c in conditions]
    lines += ["  " + line for line in table(rows, ["type", "status", "reason", "message"]).splitlines()]
    lines.append("Tunnels:")
    tunnels = tunnel_rows([lb])
    lines += ["  " + line for line in table(tunnels, ["node", "tunnel-id", "epic-address", "epic-port"]).splitlines()]
    lines.append("Events:")
    event_rows = [
        {
            "type": str(e.get("type", "")),
            "reason": str(e.get("reason", "")),
            "age": age(e.get("lastTimestamp") or e.get("eventTime")),
            "message": str(e.get("message", "")),
        }
        for e in events
    ]
    lines += ["  " + line for line in table(event_rows, ["type", "reason", "age", "message"]).splitlines()]
    return "\n".join(lines)


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
                raise CommandError(f"user namespace {namespace} already exists") from None
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
            raise CommandError(f"load balancer {name!r} not found{where}")
        if len(candidates) > 1:
            owners = ", ".join(account_of(lb["metadata"]["namespace"]) for lb in candidates)
            raise CommandError(f"load balancer {name!r} exists in several accounts ({owners}): pick one with -n")
        return candidates[0]

    def events(self, obj: JSON) -> list[JSON]:
        meta = obj["metadata"]
        selector = f"involvedObject.uid={meta['uid']}"
        listed = self.core.list_namespaced_event(meta["namespace"], field_selector=selector)
        events: list[JSON] = self.api.sanitize_for_serialization(listed.items)  # type: ignore[no-untyped-call]
        return sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def emit(data: Any, output: str, render: Callable[[], str]) -> None:
    if output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False).rstrip())
    else:
        print(render())


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    common.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    top = argparse.ArgumentParser(prog="epicctl", description="Manage an EPIC system's accounts and load balancers.")
    verbs = top.add_subparsers(dest="verb", required=True)

    create = verbs.add_parser("create", help="create a user namespace and its account")
    create_what = create.add_subparsers(dest="what", required=True)
    user_ns = create_what.add_parser("user-namespace", parents=[common], help="a user namespace and its Account")
    user_ns.add_argument("name", help="account name; the namespace is epic-NAME")

    get = verbs.add_parser("get", help="list accounts, load balancers, tunnels or endpoints")
    get_what = get.add_subparsers(dest="what", required=True)
    get_what.add_parser("accounts", aliases=["account", "acct"], parents=[common])
    listed = (
        ("loadbalancers", ["loadbalancer", "lb", "lbs"]),
        ("tunnels", ["tunnel"]),
        ("endpoints", ["endpoint", "remoteendpoints", "rep"]),
    )
    for name, aliases in listed:
        sub = get_what.add_parser(name, aliases=aliases, parents=[common])
        sub.add_argument("-n", "--account", help="only this account")

    describe = verbs.add_parser("describe", help="show one load balancer in detail")
    describe_what = describe.add_subparsers(dest="what", required=True)
    lb = describe_what.add_parser("lb", aliases=["loadbalancer"], parents=[common])
    lb.add_argument("name")
    lb.add_argument("-n", "--account", help="the load balancer's account (needed when the name is not unique)")
    return top


ALIASES = {
    "account": "accounts",
    "acct": "accounts",
    "loadbalancer": "loadbalancers",
    "lb": "loadbalancers",
    "lbs": "loadbalancers",
    "tunnel": "tunnels",
    "endpoint": "endpoints",
    "remoteendpoints": "endpoints",
    "rep": "endpoints",
}


def run(args: argparse.Namespace, epic: EPICClient) -> None:
    if args.verb == "create":
        created = epic.create_user_namespace(args.name)
        done = f"user namespace {account_namespace(args.name)} and account {args.name} created"
        emit(created, args.output, lambda: done)
    elif args.verb == "describe":
        found = epic.load_balancer(args.account, args.name)
        emit(found, args.output, lambda: describe_lb(found, epic.events(found)))
    elif ALIASES.get(args.what, args.what) == "accounts":
        accounts = epic.accounts()
        emit(accounts, args.output, lambda: table(account_rows(accounts), ["name", "namespace", "ready", "age"]))
    elif ALIASES.get(args.what, args.what) == "loadbalancers":
        lbs = epic.load_balancers(args.account)
        columns = ["account", "name", "service-id", "address", "ports", "group", "tunnels", "ready", "age"]
        emit(lbs, args.output, lambda: table(lb_rows(lbs), columns))
    elif ALIASES.get(args.what, args.what) == "endpoints":
        reps = epic.endpoints(args.account)
        columns = ["account", "load-balancer", "name", "endpoint", "port-name", "node", "tunnel-id", "ready"]
        emit(reps, args.output, lambda: table(endpoint_rows(reps), columns))
    else:
        rows = tunnel_rows(epic.load_balancers(args.account))
        columns = ["account", "load-balancer", "node", "tunnel-id", "epic-address", "epic-port"]
        emit(rows, args.output, lambda: table(rows, columns))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args, EPICClient(api_client(args.kubeconfig)))
    except CommandError as error:
        print(f"epicctl: {error}", file=sys.stderr)
        return 1
    except client.ApiException as error:
        reason = error.reason
        if error.body:
            with contextlib.suppress(ValueError):
                reason = json.loads(error.body).get("message", reason)
        print(f"epicctl: the API server refused: {reason}", file=sys.stderr)
        return 1
    except Exception as error:  # a config or connection problem: one line, not a traceback
        print(f"epicctl: {type(error).__name__}: {error}".splitlines()[0], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
