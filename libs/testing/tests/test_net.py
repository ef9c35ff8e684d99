"""Ports for the servers tests start: distinct within one pick, so that no two of one cluster's components bind the
same one."""

from __future__ import annotations

import socket

import yaml

from tollgate.testing.cluster.kwok import PORT_OPTIONS, kwokctl_config
from tollgate.testing.net import free_ports


def test_a_thousand_ports_picked_at_once_are_distinct_and_each_can_be_bound() -> None:
    # Picked one at a time from the kernel's ~28,000 ephemeral ports, a thousand would repeat about 18 times.
    ports = free_ports(1000)

    assert len(set(ports)) == 1000
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))


def test_every_control_plane_component_of_a_kwokctl_cluster_gets_a_port_of_its_own() -> None:
    for _ in range(50):
        options = yaml.safe_load(kwokctl_config())["options"]
        assert len({options[option] for option in PORT_OPTIONS}) == len(PORT_OPTIONS), options
