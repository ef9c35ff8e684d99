"""An embedded cluster that does not come up says why in its error, whose text outlives the cluster's teardown
(which removes the logs it points to)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tollgate.testing.cluster import ClusterError, EmbeddedCluster


def test_an_api_server_that_never_gets_ready_fails_with_each_components_last_log_lines(tmp_path: Path) -> None:
    cluster = EmbeddedCluster("never-ready", tmp_path / "kwok", tmp_path / "kubeconfig")
    cluster.logs_dir().mkdir(parents=True)
    (cluster.logs_dir() / "etcd.log").write_text("".join(f"etcd line {n}\n" for n in range(20)))
    (cluster.logs_dir() / "kube-apiserver.log").write_text("E1126 dial tcp 127.0.0.1:2379: connection refused\n")

    with pytest.raises(ClusterError) as raised:
        cluster.wait_ready(timeout=0)

    message = str(raised.value)
    assert "kube-apiserver not ready after 0 s" in message
    assert "== etcd.log\n" + "\n".join(f"etcd line {n}" for n in range(12, 20)) in message
    assert "== kube-apiserver.log\nE1126 dial tcp 127.0.0.1:2379: connection refused" in message
    assert "etcd line 11" not in message
