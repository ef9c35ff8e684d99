"""The embedded node's CNI plugin that gives an Envoy pod its load balancer's public address, as EPIC's Multus
attachment does (a second interface on a bridge, with the public address): chained after the bridge plugin, on ADD
it reads the pod's owner label (`epic.acnodal.io/load-balancer` or `epic.acnodal.io/gwproxy`), and when that
object has a `spec.public-address`, puts the address on the pod's loopback (so the Envoy listeners bound to it
accept what reaches the pod) and routes it on the host to the pod's address on the bridge. On DEL it removes the
route when it still leads to that pod.

One replica holds the route at a time (the last one started); the service groups' default is one replica.

Run by containerd as a CNI plugin (`tollgate.testing.node` installs a wrapper in the node's CNI bin directory):
configuration on stdin, CNI_* in the environment, result on stdout; `kubectl` and `kubeconfig` come from the
plugin's configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tollgate.models.epic import GWPROXY_LABEL, LOAD_BALANCER_LABEL

CNI_VERSION = "1.0.0"
OWNERS = {LOAD_BALANCER_LABEL: "loadbalancers.epic.acnodal.io", GWPROXY_LABEL: "gwproxies.epic.acnodal.io"}


class PluginError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def cni_args() -> dict[str, str]:
    pairs = (item.partition("=") for item in os.environ.get("CNI_ARGS", "").split(";") if item)
    return {key: value for key, _, value in pairs}


def kubectl_json(config: dict[str, Any], *args: str) -> dict[str, Any] | None:
    result = subprocess.run(
        [config["kubectl"], "--kubeconfig", config["kubeconfig"], "get", *args, "-o", "json", "--ignore-not-found"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if result.returncode != 0:
        raise PluginError(11, f"kubectl get {' '.join(args)}: {result.stderr.strip()}")
    return json.loads(result.stdout) if result.stdout.strip() else None


def public_address(config: dict[str, Any], namespace: str, pod_name: str) -> str | None:
    """The public address of the load balancer or GWProxy whose Envoy the pod is, or None."""
    pod = kubectl_json(config, "pod", pod_name, "-n", namespace)
    labels = (pod or {}).get("metadata", {}).get("labels", {})
    for label, resource in OWNERS.items():
        if label in labels:
            owner = kubectl_json(config, resource, labels[label], "-n", namespace)
            address = (owner or {}).get("spec", {}).get("public-address")
            return str(address) if address else None
    return None


def pod_ipv4(result: dict[str, Any]) -> str:
    for ip in result.get("ips", []):
        address = str(ip["address"]).split("/")[0]
        if ":" not in address:
            return address
    raise PluginError(11, "the previous plugin's result has no IPv4 address")


def ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *args] if netns is None else ["nsenter", f"--net={netns}", "ip", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise PluginError(11, f"{' '.join(command)}: {result.stderr.strip()}")


def add(config: dict[str, Any]) -> dict[str, Any]:
    previous: dict[str, Any] = config.get("prevResult") or {}
    args = cni_args()
    address = public_address(config, args.get("K8S_POD_NAMESPACE", ""), args.get("K8S_POD_NAME", ""))
    if address is not None:
        ip("addr", "replace", f"{address}/32", "dev", "lo", netns=os.environ["CNI_NETNS"])
        ip("route", "replace", f"{address}/32", "via", pod_ipv4(previous), "dev", config["bridge"])
    return previous


def delete(config: dict[str, Any]) -> None:
    previous: dict[str, Any] = config.get("prevResult") or {}
    if not previous.get("ips"):
        return
    via = pod_ipv4(previous)
    routes = subprocess.run(["ip", "-j", "route", "show", "via", via], capture_output=True, text=True).stdout
    for route in json.loads(routes or "[]"):
        if route.get("dst", "").count(".") == 3:
            subprocess.run(["ip", "route", "delete", route["dst"], "via", via], capture_output=True)


def main() -> int:
    command = os.environ.get("CNI_COMMAND", "")
    try:
        if command == "VERSION":
            print(json.dumps({"cniVersion": CNI_VERSION, "supportedVersions": ["0.4.0", "1.0.0"]}))
            return 0
        config = json.load(sys.stdin)
        if command == "ADD":
            print(json.dumps(add(config)))
        elif command == "DEL":
            delete(config)
        elif command != "CHECK":
            raise PluginError(4, f"unknown CNI_COMMAND {command!r}")
        return 0
    except PluginError as error:
        print(json.dumps({"cniVersion": CNI_VERSION, "code": error.code, "msg": str(error)}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
