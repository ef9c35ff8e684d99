"""The `job` provider, the seed's mode: the class's Job templates do the work.

Each operation (assign, unassign, firewall) becomes a Job built from `spec.updateRoutedIP` or
`spec.updateFirewall`, owned by the ClusterRoutedIPClass, in the namespace tollgate-routedip runs in,
with the operation's parameters as environment variables and the class's `fromSecretsRef` Secrets as
`envFrom`. The controller waits for the Job and deletes it once it succeeded. A failed Job is reported
(a Warning Event on the RoutedIP), deleted, and the operation is retried with a growing backoff. A Job
is labelled with a hash of its operation, so a restarted controller finds the Job it was waiting for.

Environment of `updateRoutedIP` Jobs: ACTION (assign | unassign), ROUTED_IP, ROUTED_IP_NAME,
ROUTED_IP_NAMESPACE, CLASS_NAME, NODE_NAME, NODE_ID (machine ID from spec.providerID), PROVIDER_ID,
and for assign PREVIOUS_NODE_NAME, PREVIOUS_NODE_ID.
Environment of `updateFirewall` Jobs: ACTION=firewall, CLASS_NAME, NODE_NAMES and NODE_IDS (comma
separated), PORTS (comma separated, `tcp/30080`), FIREWALL_PLAN (JSON: node -> machineID, ports).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

from tollgate.models.routedip import GROUP, VERSION
from tollgate.routedip.firewall import FirewallPlan
from tollgate.routedip.k8s import Kube
from tollgate.routedip.providers import FirewallContext, NodeTarget, ProviderError, RoutedIPRef
from tollgate.routedip.state import ClassState
from tollgate.runtime.kube import is_not_found

MANAGED_BY = "tollgate-routedip"
OPERATION_LABEL = f"{GROUP}/operation"
ACTION_LABEL = f"{GROUP}/action"
CLASS_LABEL = f"{GROUP}/class-uid"


def operation_id(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def build_job(
    template: Mapping[str, Any],
    *,
    routed_ip_class: ClassState,
    namespace: str,
    action: str,
    operation: str,
    env: Mapping[str, str],
    service_account: str,
) -> dict[str, Any]:
    """A Job from a class's Job spec template, with `env` and the class's Secrets in every container, its pods run
    as `service_account` (the one a template may name: also when it names none, rather than the namespace's
    default ServiceAccount) without an API token."""
    spec = copy.deepcopy(dict(template))
    pod_spec = spec.setdefault("template", {}).setdefault("spec", {})
    pod_spec.pop("serviceAccount", None)  # the deprecated alias: serviceAccountName alone decides
    pod_spec["serviceAccountName"] = service_account
    pod_spec["automountServiceAccountToken"] = False
    secret_names = [ref.name for ref in routed_ip_class.spec.from_secrets_ref] if routed_ip_class.spec else []
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        ours = set(env)
        container["env"] = [e for e in container.get("env") or [] if e.get("name") not in ours] + [
            {"name": name, "value": value} for name, value in env.items()
        ]
        if secret_names:
            container["envFrom"] = [
                *(container.get("envFrom") or []),
                *({"secretRef": {"name": n}} for n in secret_names),
            ]
    labels = {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        OPERATION_LABEL: operation,
        ACTION_LABEL: action,
        CLASS_LABEL: routed_ip_class.uid,
    }
    pod_metadata = spec["template"].setdefault("metadata", {})
    pod_metadata["labels"] = {**(pod_metadata.get("labels") or {}), **labels}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"routedip-{action}-{operation[:10]}-{secrets.token_hex(3)}",
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ClusterRoutedIPClass",
                    "name": routed_ip_class.name,
                    "uid": routed_ip_class.uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


def job_outcome(job: Mapping[str, Any]) -> tuple[str, str]:
    """("succeeded" | "failed" | "running", message) from a Job's conditions."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", ""
        if condition.get("type") == "Failed":
            return "failed", f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}".rstrip(": ")
    return "running", ""


class JobProvider:
    def __init__(
        self,
        kube: Kube,
        routed_ip_class: ClassState,
        namespace: str,
        *,
        service_account: str,
        wait_timeout: float = 120.0,
        poll_interval: float = 0.2,
        max_poll_interval: float = 2.0,
    ) -> None:
        self.kube = kube
        self.routed_ip_class = routed_ip_class
        self.namespace = namespace
        self.service_account = service_account
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval

    @property
    def spec(self) -> Any:
        return self.routed_ip_class.spec

    async def assign(self, routed_ip: RoutedIPRef, node: NodeTarget, previous: NodeTarget | None) -> None:
        env = self._ip_env("assign", routed_ip, node)
        env["PREVIOUS_NODE_NAME"] = previous.name if previous else ""
        env["PREVIOUS_NODE_ID"] = (previous.machine_id or "") if previous else ""
        await self.run("assign", self.spec.update_routed_ip, env)

    async def unassign(self, routed_ip: RoutedIPRef, node: NodeTarget) -> None:
        await self.run("unassign", self.spec.update_routed_ip, self._ip_env("unassign", routed_ip, node))

    async def apply_firewall(self, plan: FirewallPlan, context: FirewallContext) -> None:
        if not self.spec.update_firewall:
            return
        opened = {name: n for name, n in plan.nodes.items() if n.ports}
        env = {
            "ACTION": "firewall",
            "CLASS_NAME": self.spec.class_name,
            "NODE_NAMES": ",".join(sorted(opened)),
            "NODE_IDS": ",".join(plan.machine_ids()),
            "PORTS": ",".join(str(p) for p in plan.all_ports()),
            "FIREWALL_PLAN": json.dumps(plan.to_json(), sort_keys=True),
        }
        await self.run("firewall", self.spec.update_firewall, env)

    def _ip_env(self, action: str, routed_ip: RoutedIPRef, node: NodeTarget) -> dict[str, str]:
        return {
            "ACTION": action,
            "ROUTED_IP": routed_ip.ip,
            "ROUTED_IP_NAME": routed_ip.name,
            "ROUTED_IP_NAMESPACE": routed_ip.namespace,
            "CLASS_NAME": self.spec.class_name,
            "NODE_NAME": node.name,
            "NODE_ID": node.machine_id or "",
            "PROVIDER_ID": node.provider_id or "",
        }

    async def run(self, action: str, template: Mapping[str, Any] | None, env: Mapping[str, str]) -> None:
        """Run the operation's Job to completion (or find the one already running), then delete it."""
        if template is None:
            raise ProviderError(f"spec.{'updateFirewall' if action == 'firewall' else 'updateRoutedIP'} is not set")
        operation = operation_id(self.routed_ip_class.uid, action, env, template)
        jobs = await self.kube.list_jobs(self.namespace, f"{OPERATION_LABEL}={operation}")
        outcomes = {job["metadata"]["name"]: job_outcome(job) for job in jobs}
        for name, (outcome, message) in outcomes.items():
            if outcome == "failed":
                await self._delete(name)
                raise ProviderError(f"Job {self.namespace}/{name} ({action}) failed: {message}", reason="JobFailed")
        finished = set(outcomes)
        if not any(outcome == "succeeded" for outcome, _ in outcomes.values()):
            running = [name for name, (outcome, _) in outcomes.items() if outcome == "running"]
            if running:
                name = running[0]
            else:
                body = build_job(
                    template,
                    routed_ip_class=self.routed_ip_class,
                    namespace=self.namespace,
                    action=action,
                    operation=operation,
                    env=env,
                    service_account=self.service_account,
                )
                name = (await self.kube.create_job(self.namespace, body))["metadata"]["name"]
            await self._wait(name, action)
            finished.add(name)
        for name in sorted(finished):
            await self._delete(name)

    async def _wait(self, name: str, action: str) -> None:
        deadline = time.monotonic() + self.wait_timeout
        interval = self.poll_interval
        while True:
            try:
                outcome, message = job_outcome(await self.kube.read_job(self.namespace, name))
            except Exception as error:
                if is_not_found(error):
                    raise ProviderError(
                        f"Job {self.namespace}/{name} ({action}) disappeared", reason="JobGone"
                    ) from None
                raise
            if outcome == "succeeded":
                return
            if outcome == "failed":
                await self._delete(name)
                raise ProviderError(f"Job {self.namespace}/{name} ({action}) failed: {message}", reason="JobFailed")
            if time.monotonic() > deadline:
                raise ProviderError(
                    f"Job {self.namespace}/{name} ({action}) still running after {self.wait_timeout:.0f} s",
                    reason="JobRunning",
                    retry_after=5,
                )
            await asyncio.sleep(interval)
            interval = min(self.max_poll_interval, interval * 1.5)

    async def _delete(self, name: str) -> None:
        try:
            await self.kube.delete_job(self.namespace, name)
        except Exception as error:
            if not is_not_found(error):
                raise
