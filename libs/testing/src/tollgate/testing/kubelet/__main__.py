"""The embedded kubelet: runs the pods of tollgate's own services (the charts' Deployments) as real processes
started from this checkout, honouring the pod spec the chart rendered. See docs/embedded-pods.md.

A pod labelled app.kubernetes.io/part-of=tollgate without tollgate.io/envoy-proxy (Envoy pods are the
supervisor's), whose image is <prefix><service>:<tag>, runs services/<service>'s Dockerfile entrypoint
with the pod's env, volumes (Secret, ConfigMap, projected ServiceAccount token, ...), user and probes; its
listeners bind the pod IP; cluster Service names resolve through the kubelet's hosts file.

Run it as root: `python -m tollgate.testing.kubelet` (make dev and the tests do).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from kubernetes import client

from tollgate.runtime.events import EventRecorder
from tollgate.runtime.kube import api_client
from tollgate.runtime.service import ServiceContext, run
from tollgate.testing.kubelet.image import load_images
from tollgate.testing.kubelet.runtime import COMPONENT, Kubelet, Node, Settings
from tollgate.testing.kubelet.spec import service_env
from tollgate.testing.pods import Watches
from tollgate.testing.tools import repo_root, tool

PODNET = "libpodnet.so"


def image_files(podnet: Path) -> list[str]:
    """What a non-root process must be able to reach, as it could in the image (see container.py): the
    interpreter, the venv, the checkout and the podnet shim."""
    return [os.path.realpath(sys.executable), sys.prefix, str(repo_root()), str(podnet)]


async def main(settings: Settings, context: ServiceContext) -> None:
    api = api_client(settings.kubeconfig)
    core = client.CoreV1Api(api)
    settings.state_dir = settings.state_dir.resolve()
    settings.log_dir = settings.log_dir.resolve()
    settings.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds the pods' Secrets
    api_url = api.configuration.host
    api_address = str(socket.getaddrinfo(urlsplit(api_url).hostname, None, socket.AF_INET)[0][4][0])
    podnet = tool(PODNET)
    images = load_images(repo_root(), sys.prefix)
    async with aiohttp.ClientSession() as session:
        events = EventRecorder(api, COMPONENT)
        node = Node(core, settings, images, service_env(api_url), podnet, image_files(podnet), session, events)
        kubelet = Kubelet(node, api_address, urlsplit(api_url).port or 443)
        kubelet.write_hosts()
        context.health.add_readiness_check("pods", lambda: kubelet.synced or "pods not listed yet")
        watches = Watches()
        watches.start("services", core.list_service_for_all_namespaces)
        watches.start("pods", core.list_pod_for_all_namespaces)
        try:
            while (event := await watches.next(context.stop)) is not None:
                source, kind, obj = event
                if source == "pods":
                    await kubelet.on_pod(kind, obj)
                else:
                    await kubelet.on_service(kind, obj)
        finally:
            watches.close()
            await kubelet.stop_all()


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.testing.kubelet", __doc__ or "", Settings, main))
