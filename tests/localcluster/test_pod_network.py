"""The node agent's pod network (localcluster/pod_network.py) on this machine's kernel: network
namespaces, veths and the node's bridge, without a cluster."""

from __future__ import annotations

import subprocess
import uuid

from localcluster.pod_network import PodNetwork, reserve_subnet


def _bridge_mac(network: PodNetwork) -> str:
    return subprocess.run(["ip", "netns", "exec", network.netns, "cat",
                           f"/sys/class/net/{network.bridge}/address"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _ports(network: PodNetwork) -> list[str]:
    listing = subprocess.run(["ip", "-n", network.netns, "-o", "link", "show", "master",
                              network.bridge], capture_output=True, text=True, check=True).stdout
    return [line.split(": ")[1].split("@")[0] for line in listing.splitlines()]


def test_the_bridge_keeps_its_mac_address_as_pods_come_and_go():
    """Left to the kernel, a bridge takes the lowest MAC address of its ports (linux
    net/bridge/br_stp_if.c, br_stp_recalculate_bridge_id, on the kernel this test runs on), so
    a pod whose veth has a lower one would move it, and every other pod's ARP entry for its
    gateway would name an address that no longer answers: they would lose the API server for
    up to a minute. Here a port takes the lowest address there is, then leaves: the bridge's
    stays as it was set."""
    network = PodNetwork(reserve_subnet())
    pods = [f"fk-test-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    network.up()
    try:
        before = _bridge_mac(network)
        for pod in pods:
            network.add_pod(pod)
        subprocess.run(["ip", "-n", network.netns, "link", "set", network.veth(pods[0]),
                        "address", "00:00:00:00:00:01"], check=True)
        assert _bridge_mac(network) == before
        network.remove_pod(pods[0])  # the lowest port leaves
        assert len(_ports(network)) == 1
        assert _bridge_mac(network) == before
    finally:
        for pod in pods:
            network.remove_pod(pod)
        network.down()
