"""The ``cluster`` fixture: a ready stand-in cluster (:func:`tests.fmnist_kfp.preflight.
cluster.ready_cluster`) and the KFP API stand-in, with no credentials Secret or PVC name set."""

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


@pytest.fixture(scope="session")
def kubeflow_api_server(tmp_path_factory):
    """The real API server with a Kubeflow 1.11 install and the README's setup (tests/
    fmnist_kfp/preflight/on_the_api_server.py), started once for the tests that share it."""
    from tests.fmnist_kfp.preflight.on_the_api_server import start

    kubeflow = start(tmp_path_factory.mktemp("kubeflow-api-server"))
    try:
        yield kubeflow
    finally:
        kubeflow.plane.stop()


@pytest.fixture
def kubeflow(kubeflow_api_server, monkeypatch, tmp_path):
    """(the ready install on the real API server, the KFP API stand-in), with no credentials
    Secret or PVC name set; what the test changed there is undone after it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    try:
        with KfpStandIn() as kfp:
            yield kubeflow_api_server, kfp
    finally:
        kubeflow_api_server.restore()
