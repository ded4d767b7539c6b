"""The pod network of the node agent, as a node has it: the node's own network namespace
(``fkn<subnet>``) holding a bridge with a /24 of 10.244.0.0/16 per cluster, a network namespace
per pod with a veth on that bridge, and a veth pair linking the node to the host, on which the
relay lets pods (and kube-proxy) reach the API server that listens on the host's loopback.

The node has a namespace of its own, not the host's, because kube-proxy programs the network
namespace it runs in, under fixed names (its nftables table ``kube-proxy``): two clusters on one
machine, each with its kube-proxy, would otherwise rewrite each other's rules."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import BaseRequestHandler, TCPServer, ThreadingMixIn


def node_netns(subnet: int) -> str:
    """The node's network namespace."""
    return f"fkn{subnet}"


def link_address(subnet: int, end: str) -> str:
    """An address on the /30 linking the host (``end="host"``) and the node (``"node"``)."""
    last_octet = {"host": 1, "node": 2}[end]
    return f"10.245.{subnet}.{last_octet}"


def host_address(subnet: int) -> str:
    """The host's end of its link to the node: where pods reach the API server (the relay)."""
    return link_address(subnet, "host")


@dataclass
class PodNetwork:
    """The node's network namespace, its bridge and a /24 of 10.244.0.0/16 for the pods of one
    cluster."""

    subnet: int  # the third octet
    bridge: str = ""
    next_host: int = 2
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.bridge = f"fk{self.subnet}br"

    @property
    def netns(self) -> str:
        return node_netns(self.subnet)

    @property
    def gateway(self) -> str:
        """The bridge's address, the pods' default route."""
        return f"10.244.{self.subnet}.1"

    @property
    def bridge_mac(self) -> str:
        """The bridge's MAC address: locally administered, one per subnet (02:00 and the
        gateway's four octets)."""
        return "02:00:" + ":".join(f"{int(octet):02x}" for octet in self.gateway.split("."))

    @property
    def cidr(self) -> str:
        return f"10.244.{self.subnet}.0/24"

    @property
    def host_address(self) -> str:
        return host_address(self.subnet)

    @property
    def _uplink(self) -> str:
        return f"fk{self.subnet}up"

    def up(self) -> None:
        self.down()
        node = self.netns
        host_end, node_end = (link_address(self.subnet, end) for end in ("host", "node"))
        _ip("netns", "add", node)
        _ip("link", "add", self._uplink, "type", "veth", "peer", "name", "uplink", "netns", node)
        _ip("addr", "add", f"{host_end}/30", "dev", self._uplink)
        _ip("link", "set", self._uplink, "up")
        _ip("-n", node, "link", "set", "lo", "up")
        _ip("-n", node, "addr", "add", f"{node_end}/30", "dev", "uplink")
        _ip("-n", node, "link", "set", "uplink", "up")
        # A bridge's MAC address is set here, once: left to the kernel, it is the lowest of
        # its ports' and changes as pods' veths come and go (linux net/bridge/br_stp_if.c,
        # br_stp_recalculate_bridge_id, which keeps an address that was set), and each pod's
        # ARP entry for its gateway then names an address nothing answers to: the pods lose the
        # API server until the entry expires, up to a minute (a step's SIGTERM cleanup was lost
        # so in CI). The CNI bridge plugin does the same (containernetworking/plugins v1.9.1
        # plugins/main/bridge/bridge.go lines 301-305).
        _ip("-n", node, "link", "add", self.bridge, "address", self.bridge_mac, "type", "bridge")
        _ip("-n", node, "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("-n", node, "link", "set", self.bridge, "up")
        _ip("-n", node, "route", "add", "default", "via", host_end)
        _ip("route", "add", self.cidr, "via", node_end)
        # The node forwards between its uplink and the bridge; bridged traffic passes its
        # netfilter hooks, so that kube-proxy's DNAT of one pod's connection to another on the
        # same bridge is undone on the way back (what kubeadm requires of a node: br_netfilter).
        _sysctl(node, "net.ipv4.ip_forward", "1")
        _sysctl(node, "net.bridge.bridge-nf-call-iptables", "1")

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", self._uplink], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)

    def add_pod(self, name: str) -> str:
        """A network namespace ``name`` on the bridge; its address."""
        with self.lock:
            host = self.next_host
            self.next_host += 1
        if host > 254:
            raise RuntimeError("the pod network's /24 is full")
        address = f"10.244.{self.subnet}.{host}"
        self.remove_pod(name)
        veth = self.veth(name)
        _ip("netns", "add", name)
        _ip("-n", self.netns, "link", "add", veth, "type", "veth", "peer", "name", "eth0",
            "netns", name)
        _ip("-n", self.netns, "link", "set", veth, "master", self.bridge, "up")
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "route", "add", "default", "via", self.gateway)
        return address

    @staticmethod
    def veth(name: str) -> str:
        """The node's end of pod namespace ``name``'s veth, on the bridge. Named after the
        pod's namespace (its UID), not after the address: a veth that a killed run left behind
        (its namespace never deleted) would collide with a reused address."""
        return "fv" + name.removeprefix("fk-").replace("-", "")[:12]

    def remove_pod(self, name: str) -> None:
        # The veth first, which takes its peer with it at once: the kernel destroys a deleted
        # namespace, and the veth in it, later, from a work queue.
        subprocess.run(["ip", "-n", self.netns, "link", "del", self.veth(name)],
                       capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def reserve_subnet() -> int:
    """A /24 of 10.244.0.0/16 whose bridge no cluster on this machine has, reserved for 10
    minutes against every other caller (two test runs at once never share one), as the free
    ports are (fmnist_kfp.launcher.local_processes.free_ports)."""
    import fcntl
    import random
    import tempfile

    directory = Path(tempfile.gettempdir()) / f"fmnist-kfp-subnets-{os.getuid()}"
    directory.mkdir(exist_ok=True)
    with open(directory / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = random.SystemRandom().randrange(1, 251)
        for offset in range(250):
            subnet = (start + offset) % 250 + 1
            reservation = directory / str(subnet)
            if reservation.exists() and time.time() - reservation.stat().st_mtime < 600:
                continue
            if Path(f"/run/netns/{node_netns(subnet)}").exists() or \
                    Path(f"/sys/class/net/fk{subnet}up").exists():
                continue
            reservation.touch()
            return subnet
    raise RuntimeError("no free /24 left in 10.244.0.0/16 for the pod network")


def _sysctl(netns: str, key: str, value: str) -> None:
    """Sets ``key`` in ``netns`` (these are per network namespace)."""
    path = "/proc/sys/" + key.replace(".", "/")
    subprocess.run(["ip", "netns", "exec", netns, "sh", "-c", f"echo {value} > {path}"],
                   capture_output=True, check=True)


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


class _Relay(ThreadingMixIn, TCPServer):
    """Bytes both ways between a pod and the API server on loopback."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.target = target
        super().__init__(listen, _RelayHandler)


class _RelayHandler(BaseRequestHandler):
    def handle(self):
        upstream = socket.create_connection(self.server.target)

        def pump(source, sink):
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (source, sink):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        other = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        other.start()
        pump(self.request, upstream)
        other.join()
        upstream.close()


