"""The port file a model server writes once it listens (``--port_file``), and its reader.

The server binds its own ports (0: any free one) and reports them, so whoever started it
never picks a port that another process can take before the server binds it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path


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
