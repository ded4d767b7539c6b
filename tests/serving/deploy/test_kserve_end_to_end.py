"""The deploy and predict steps' kubernetes path end to end in Serverless mode: the step code
as a pipeline pod runs it (``deploy(backend="kubernetes")`` with the real verifier, then
``predict_step``), against the KServe stand-in, with real model servers on loopback behind the
stand-in's cluster network (an HTTP proxy that routes cluster-local hosts as Knative and the
profile's Istio policy would). Real test images, real predictions.

Knative cannot run here, so Serverless mode stays on the stand-in; Standard mode (the
Deployment path) runs on the real KServe: ``test_kserve_on_the_cluster.py``."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.deploy.step import DeploymentError, deploy
from fmnist_kfp.kfp_components.predict.step import predict_step
from fmnist_kfp.serving.deploy.local_deployer import start_server, stop_process
from tests.conftest import export_untrained_model
from tests.setup_manifests import build
from tests.standins.kserve import KServeStandIn

pytestmark = pytest.mark.slow
NS = "kubeflow"
NAME = "fashion-mnist"
STORE = "minio://mlpipeline/v2/artifacts/fashion-mnist-training/run-{}/select/best_model"
IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"


@pytest.fixture(scope="module")
def models(exported_model, tmp_path_factory) -> dict[str, str]:
    """Model artifacts in KFP's store → the exported model each holds (run 3 claims to be a
    new model but its server runs run 1's weights: a broken build)."""
    other = export_untrained_model(tmp_path_factory.mktemp("other"), seed=8)
    return {"1": str(exported_model), "2": str(other), "3": str(other)}


@pytest.fixture
def cluster(models, monkeypatch, tmp_path):
    """The stand-in set up per the README (serving credentials, the Istio policy), Istio
    enforced, pods' HTTP routed through its network; model servers started on demand."""
    monkeypatch.setenv("FMNIST_SERVING_STATE_DIR", str(tmp_path / "servers"))
    servers: dict[tuple[str, str], object] = {}
    weights = {**models, "3": models["1"]}

    def backend(isvc_name: str, uri: str) -> str:
        run = uri.split("/run-")[1].split("/")[0]
        key = (isvc_name, run)
        if key not in servers:
            servers[key] = start_server(isvc_name, weights[run])
        return servers[key].url

    yield backend, servers
    for server in servers.values():
        stop_process(server.pid)


def run_deploy(standin, models, data_dir, run: str, accuracy: float, **serving):
    return deploy(model_dir=models[run], model_uri=STORE.format(run), test_accuracy=accuracy,
                  data_dir=str(data_dir), backend="kubernetes", model_name=NAME,
                  tolerance=0.005, verification_images=32,
                  serving={"namespace": NS, "image": IMAGE, **serving},
                  kserve_client=standin.kserve_client(NS), log=lambda line: None)


@pytest.fixture
def data_dir(synthetic_dataset, monkeypatch):
    """The ingested test split; loopback traffic (the API stand-in, server readiness) does not
    go through the cluster network."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return synthetic_dataset


def standin_for(default_mode: str, backend) -> KServeStandIn:
    standin = KServeStandIn(default_mode=default_mode, ready_after=0)
    standin.istio = True
    standin.backend = backend
    return standin


def setup(standin) -> None:
    for base in ("serving-credentials", "serving-access"):
        for obj in build(base, namespace=NS):
            standin.put(obj)


def start_servers(backend, runs: list[str]) -> None:
    """Starts the model servers of ``runs`` before the first deploy, together, as KServe has
    its pods running before it says Ready. (Started on the first request the proxy routes,
    a server's start, TensorFlow's import and the model's load, counted against that
    request's timeout: under a full CI's load it ran out.)"""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(runs)) as pool:
        list(pool.map(lambda run: backend(NAME, STORE.format(run)), runs))


def test_deploy_and_predict_reach_the_model_inside_the_cluster(cluster, data_dir, models,
                                                                monkeypatch):
    backend, servers = cluster
    start_servers(backend, ["1", "2", "3"])
    with standin_for("Serverless", backend) as standin, standin.network() as network:
        monkeypatch.setenv("HTTP_PROXY", network.url)
        setup(standin)
        first = run_deploy(standin, models, data_dir, "1", 0.80)
        assert first.action == "created" and first.record()["backend"] == "kubernetes"
        assert first.url.endswith(".svc.cluster.local")
        assert first.verification.passed and first.verification.report["ok"]
        body = standin.isvc()["spec"]["predictor"]
        assert body["serviceAccountName"] == "fmnist-serving"  # KFP's store: our credentials
        assert body["model"]["storageUri"] == STORE.format("1").replace("minio://", "s3://")

        second = run_deploy(standin, models, data_dir, "2", 0.85)
        assert second.action == "promoted", second.reason
        assert second.verification.passed and second.verification.report["ok"]
        # The candidate was reached at its own cluster-local host.
        assert any(uri and uri.endswith("run-2/select/best_model")
                   for _, url, uri in network.requests if url.startswith(second.canary_url))

        # The predict step, with the URL the deploy step output, gets the new model's answers.
        metrics = predict_step(model_dir=models["2"], data_dir=str(data_dir),
                               url=second.url, model_name=NAME, sample_size=48,
                               serves_model=True, log=lambda line: None)
        assert metrics.failures == 0 and metrics.unexplained_disagreements == 0

        # A broken build (run 3's artifact serves other weights) fails verification.
        with pytest.raises(DeploymentError, match="failed verification"):
            run_deploy(standin, models, data_dir, "3", 0.90)
        metrics = predict_step(model_dir=models["2"], data_dir=str(data_dir),
                               url=second.url, model_name=NAME, sample_size=16,
                               serves_model=True, log=lambda line: None)
        assert metrics.unexplained_disagreements == 0  # run 2 still answers


def test_without_the_istio_policy_the_pods_are_refused(cluster, data_dir, models,
                                                       monkeypatch):
    backend, _ = cluster
    with standin_for("Serverless", backend) as standin, \
            standin.network() as network:
        monkeypatch.setenv("HTTP_PROXY", network.url)
        for obj in build("serving-credentials", namespace=NS):
            standin.put(obj)
        with pytest.raises(Exception, match="HTTP 403 RBAC: access denied"):
            run_deploy(standin, models, data_dir, "1", 0.80)
        assert [uri for _, _, uri in network.requests] == [None, None]  # refused by Istio


def test_a_model_in_kfps_store_without_credentials_is_refused_before_any_write(
        cluster, data_dir, models, monkeypatch):
    backend, servers = cluster
    with standin_for("Serverless", backend) as standin:
        with pytest.raises(UserInputError, match="fmnist-serving.*does not exist.*"
                                                 "manifests/serving-credentials"):
            run_deploy(standin, models, data_dir, "1", 0.80)
        assert not standin.isvc_writes() and not standin.runtime_writes() and not servers
