"""The loopback ports the local launcher hands to processes that bind them later."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile

import pytest

from fmnist_kfp.launcher import local_processes
from fmnist_kfp.launcher.local_processes import PORT_RANGE, free_ports


def test_ports_come_from_below_the_ephemeral_range_and_are_free():
    low, high = (int(v) for v in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    ports = free_ports(5)
    assert len(set(ports)) == 5
    assert all(PORT_RANGE[0] <= p < PORT_RANGE[1] and not low <= p <= high for p in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_callers_in_other_processes_never_get_a_reserved_port(tmp_path, monkeypatch):
    """Two test workers (or two runs) choose at the same moment: no port twice, though each
    is still free when the other chooses."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    chooser = ("import json; from fmnist_kfp.launcher.local_processes import free_ports; "
               "print(json.dumps(free_ports(200)))")
    processes = [subprocess.Popen([sys.executable, "-c", chooser], stdout=subprocess.PIPE,
                                  text=True) for _ in range(3)]
    chosen = [p.communicate(timeout=120)[0] for p in processes]
    ports = [port for output in chosen for port in json.loads(output)]
    assert len(ports) == 600 and len(set(ports)) == 600


def test_a_bound_port_is_skipped_and_a_chosen_one_stays_reserved(tmp_path, monkeypatch):
    base = next(p for p in free_ports(20) if local_processes._bindable(p + 1))  # two free
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # reservations of this test only
    monkeypatch.setattr(local_processes, "PORT_RANGE", (base, base + 2))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", base))
        assert free_ports(1) == [base + 1]
    # The bound one is free again, but not reserved; the chosen one is reserved.
    assert free_ports(1) == [base]
    with pytest.raises(OSError, match="no 1 free loopback ports"):
        free_ports(1)
