"""The model server's ports: bound by the server itself, never shared with another process
(:func:`bind_socket`, :func:`check_ports`), and the port file it writes once it listens
(``--port_file``), with its reader.

The server binds its own ports (0: any free one) and reports them, so whoever started it
never picks a port that another process can take before the server binds it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from fmnist_kfp.errors import UserInputError


def write_port_file(path: str, http_port: int, grpc_port: int | None) -> None:
    """Writes the ports atomically: a reader sees the whole file or none."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}")
    temporary.write_text(json.dumps({"http_port": http_port, "grpc_port": grpc_port,
                                     "pid": os.getpid()}))
    temporary.replace(target)


def read_port_file(path: str | Path, timeout: float,
                   is_alive: Callable[[], bool] | None = None) -> dict:
    """Waits (at most ``timeout`` s) for a server's port file; raises if the server died."""
    deadline = time.monotonic() + timeout
    target = Path(path)
    while time.monotonic() < deadline:
        if target.exists():
            return json.loads(target.read_text())
        if is_alive is not None and not is_alive():
            raise RuntimeError("the model server exited before it was listening")
        time.sleep(0.1)
    raise TimeoutError(f"the model server wrote no port file in {timeout:.0f} s")


class PortInUse(UserInputError):
    """A port the server was told to listen on cannot be had: the message names it and the
    flag that picks another."""


def bind_socket(host: str, port: int, what: str = "HTTP", flag: str = "--http_port"
                ) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port), bound here so the server,
    not its caller, owns the port from the start. No ``SO_REUSEPORT``: a port another process
    listens on is refused (:class:`PortInUse`, naming ``what`` port and its ``flag``), never
    shared."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it a response waits for the client's delayed ACK (40 ms here).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise PortInUse(f"cannot listen for {what} on {host}:{port}: "
                        f"{error.strerror or error}; pick another {flag}, or stop what uses "
                        "it") from None
    sock.set_inheritable(True)
    return sock


def check_ports(host: str, http_port: int, grpc_port: int | None) -> None:
    """Fails (:class:`PortInUse`) where ``host:http_port`` or ``host:grpc_port`` (None: no
    gRPC; 0: any free port) cannot be listened on: asked before the model loads, by the rule
    the server binds with."""
    for port, what, flag in ((http_port, "HTTP", "--http_port"),
                             (grpc_port, "gRPC", "--grpc_port")):
        if port:
            bind_socket(host, port, what, flag).close()
