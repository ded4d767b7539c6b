"""The pod network of the node agent: a bridge with a /24 of 10.244.0.0/16 per cluster, a
network namespace per pod with a veth on the bridge, and the relay that lets pods reach the API
server, which listens on loopback, at the bridge's address."""

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


@dataclass
class PodNetwork:
    """A bridge on the host and a /24 of 10.244.0.0/16 for the pods of one cluster."""

    subnet: int  # the third octet
    bridge: str = ""
    next_host: int = 2
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.bridge = f"fk{self.subnet}br"

    @property
    def gateway(self) -> str:
        return f"10.244.{self.subnet}.1"

    def up(self) -> None:
        self.down()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def add_pod(self, name: str) -> str:
        """A network namespace ``name`` on the bridge; its address."""
        with self.lock:
            host = self.next_host
            self.next_host += 1
        if host > 254:
            raise RuntimeError("the pod network's /24 is full")
        address = f"10.244.{self.subnet}.{host}"
        self.remove_pod(name)
        # Named after the pod's namespace (its UID), not after the address: a veth that a killed
        # run left behind (its namespace never deleted) would collide with a reused address.
        veth = "fv" + name.removeprefix("fk-").replace("-", "")[:12]
        _ip("netns", "add", name)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "route", "add", "default", "via", self.gateway)
        return address

    def remove_pod(self, name: str) -> None:
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
            if Path(f"/sys/class/net/fk{subnet}br").exists():
                continue
            reservation.touch()
            return subnet
    raise RuntimeError("no free /24 left in 10.244.0.0/16 for the pod network")


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


