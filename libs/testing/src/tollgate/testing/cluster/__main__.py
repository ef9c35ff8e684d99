"""`python -m tollgate.testing.cluster up|down|status|watch`: the embedded cluster of `make cluster` (or, with
--workdir, another one), and its watchdog."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from tollgate.runtime.logging import setup_logging
from tollgate.testing import node
from tollgate.testing.cluster.embedded import ClusterError, EmbeddedCluster, dev_cluster
from tollgate.testing.cluster.watchdog import ControlPlaneWatchdog
from tollgate.testing.tools import repo_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tollgate.testing.cluster", description="The embedded cluster.")
    parser.add_argument("action", choices=["up", "down", "status", "watch"])
    parser.add_argument("--nodes", type=int, default=3, help="KWOK's fake nodes")
    parser.add_argument("--real-node", action="store_true", help="with the real node (tollgate.testing.node)")
    parser.add_argument("--workdir", type=Path, help="the cluster's KWOK_WORKDIR (default: make cluster's)")
    parser.add_argument("--name", help="the cluster's name, with --workdir")
    parser.add_argument("--kubeconfig", type=Path, help="the cluster's kubeconfig, with --workdir")
    args = parser.parse_args(argv)
    cluster = dev_cluster(repo_root())
    if args.workdir is not None:
        cluster = EmbeddedCluster(args.name or cluster.name, args.workdir, args.kubeconfig or cluster.kubeconfig)
    cluster.real_node = args.real_node
    if args.action == "watch":
        setup_logging("cluster-watchdog")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        ControlPlaneWatchdog(cluster).run(stop)
        return 0
    if args.action == "up":
        try:
            seconds = cluster.up(args.nodes)
        except (ClusterError, node.NodeError) as error:
            print(f"make cluster: {error}", file=sys.stderr)
            return 2
        real = " and the real node" if args.real_node else ""
        print(f"cluster {cluster.name} ready in {seconds:.1f} s with {args.nodes} KWOK nodes{real}")
        print(f"  export KUBECONFIG={cluster.kubeconfig}")
        print(f"  watchdog pid {cluster.watchdog_pid()}, log {cluster.logs_dir() / 'watchdog.log'}")
        print(cluster.kubectl("get", "nodes", "-o", "wide").stdout.rstrip())
    elif args.action == "down":
        cluster.down()
        print(f"cluster {cluster.name} deleted")
    else:
        ready = cluster.is_ready()
        print(f"cluster {cluster.name}: {'ready' if ready else 'not running'}")
        return 0 if ready else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
