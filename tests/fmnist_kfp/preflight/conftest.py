"""The ``cluster`` fixture: a ready stand-in cluster (:func:`tests.fmnist_kfp.preflight.
cluster.ready_cluster`) and the KFP API stand-in, with no credentials Secret or PVC name set.
(Kubeflow on the real API server: ``kubeflow`` and its shapes, tests/conftest.py.)"""

from __future__ import annotations

import pytest

from tests.fmnist_kfp.preflight.cluster import ready_cluster
from tests.standins.kfp import KfpStandIn
from tests.standins.kserve import KServeStandIn


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    with KServeStandIn(rbac=True) as standin, KfpStandIn() as kfp:
        ready_cluster(standin)
        yield standin, kfp
