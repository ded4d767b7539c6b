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


def _kubeflow(server, shape: str, monkeypatch, tmp_path):
    """(the install on the real API server in ``shape``, the KFP API stand-in), with no
    credentials Secret or PVC name set; what the test changed there is undone after it."""
    from tests.fmnist_kfp.preflight import on_the_api_server

    server.use_shape(shape, on_the_api_server.SHAPES[shape])
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    try:
        with KfpStandIn() as kfp:
            yield server, kfp
    finally:
        server.restore()


@pytest.fixture
def kubeflow(kubeflow_api_server, monkeypatch, tmp_path):
    """Kubeflow 1.11 after the README's setup, on the real API server (``_kubeflow``)."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 1.11", monkeypatch, tmp_path)


@pytest.fixture
def kubeflow_2603(kubeflow_api_server, monkeypatch, tmp_path):
    """A stock Kubeflow 26.03 after the README's setup, on the real API server (``_kubeflow``):
    Trainer v2.1.0 and JobSet v0.10.1 installed, no Training Operator v1 (its example install
    leaves it out: kubeflow/manifests 26.03 example/kustomization.yaml lines 90-93), and
    ``kubectl apply -k manifests/trainer-runtime``."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 26.03", monkeypatch, tmp_path)


@pytest.fixture
def kubeflow_and_trainer(kubeflow_api_server, monkeypatch, tmp_path):
    """Kubeflow 1.11 after the README's setup with Trainer v2 beside the Training Operator v1,
    and ``kubectl apply -k manifests/trainer-runtime``, on the real API server
    (``_kubeflow``)."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 1.11 and Trainer v2", monkeypatch,
                         tmp_path)
