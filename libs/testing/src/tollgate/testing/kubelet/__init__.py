"""The embedded cluster's kubelet for tollgate's own pods (docs/embedded-pods.md).

Pure translations: image (Dockerfile -> image config), spec (pod -> launch plan), volumes (-> files),
hosts (Services and pods -> hosts file), proxy (Services -> ClusterIP listeners and endpoints), probes,
status, stages (the KWOK stages). I/O: container (the launcher, run in the container's namespaces),
runtime (pod workers and container runners), __main__ (the service).
"""
