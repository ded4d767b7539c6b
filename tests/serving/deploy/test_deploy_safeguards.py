"""What keeps a deployment safe, through the interfaces a user meets (the deploy step,
``deploy_with_kserve``, the CLI, the compiled YAML): no Secret in the compiled YAML, a KFP
backend too old refused, the cluster-local address and the canary tag verified, a model in
KFP's store without credentials refused before any write, a bad candidate that never touches
the served model, and a metric Knative's autoscaler refuses refused before any write (issue
10's items 2, 3, 4 and 6: each test failed on the code that had the bug). The rules the
stand-ins enforce are cited in ``tests/standins/kserve.py``, ``tests/standins/kfp.py`` and
``tests/fmnist_kfp/test_cluster_client.py``."""

from __future__ import annotations

import pytest
import yaml

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.serving.deploy.kserve_deployer import deploy_with_kserve
from fmnist_kfp.serving.deploy.rollout_base import Acceptance, Candidate
from fmnist_kfp.serving.deploy.rollout_result import Action
from fmnist_kfp.settings.serving import KServeSettings
from tests import ROOT
from tests.standins.kfp import API, KfpStandIn
from tests.standins.kserve import KServeStandIn

NS, NAME = "kubeflow", "fashion-mnist"
IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
OLD, NEW = "pvc://fmnist-data/models/run-1", "pvc://fmnist-data/models/run-2"


class Verifier:
    """Scores the model the stand-in's network says answers the URL."""

    def __init__(self, standin, accuracy, outside=None):
        self.standin, self.accuracy, self.urls = standin, accuracy, []
        self.outside = outside  # where an address outside the cluster leads (item 6 only)

    def __call__(self, url, model_name=None):
        self.urls.append(url)
        uri, _ = self.standin.answering(url)
        if uri is None and self.outside and ".svc.cluster.local" not in url:
            uri, _ = self.standin.answering(self.outside)
        if uri is None:
            return {"ok": False, "accuracy": 0.0, "requests": 1, "failures": 1}
        return {"ok": True, "accuracy": self.accuracy.get(uri, 0.0), "requests": 10,
                "failures": 0}


def deploy(standin, uri, accuracy, verifier, **settings):
    return deploy_with_kserve(
        KServeSettings(namespace=NS, image=IMAGE, ready_timeout_seconds=5, **settings),
        Candidate(uri, accuracy), Acceptance(0.005, verifier),
        client=standin.kserve_client(NS), poll_seconds=0.005, log=lambda line: None)


# -- item 2: Kubeflow 1.10's KFP backends ---------------------------------------------------


def test_the_default_compiled_yaml_references_no_secret():
    """KFP < 2.15.0 drops ``optional`` on a Secret turned into env vars, so a referenced but
    missing Secret stops the pods in CreateContainerConfigError."""
    _, platform = yaml.safe_load_all((ROOT / "compiled/fashion_mnist_pipeline.yaml").read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert not [name for name, spec in executors.items() if "secretAsEnv" in spec]


def test_a_backend_older_than_2_14_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    old = {"commit_sha": "unknown", "tag_name": "unknown", "multi_user": True}  # 2.4.1/2.5.0
    with KfpStandIn(healthz=old) as standin:
        assert cli_main(["upload", "--host", standin.url]) == 2
        assert "2.14.0" in capsys.readouterr().err
        assert not standin.find("POST", f"{API}/pipelines/upload")


# -- item 3: in-cluster addresses -----------------------------------------------------------


def test_deploy_verifies_the_cluster_local_address_and_canary_tag():
    with KServeStandIn() as standin:
        verifier = Verifier(standin, {OLD: 0.90, NEW: 0.95})
        first = deploy(standin, OLD, 0.90, verifier)
        second = deploy(standin, NEW, 0.95, verifier)
    assert verifier.urls == [f"http://{NAME}.{NS}.svc.cluster.local",
                             f"http://latest-{NAME}-predictor.{NS}.svc.cluster.local"]
    assert first.url == second.url == f"http://{NAME}.{NS}.svc.cluster.local"


# -- item 4: credentials for KFP's object store ---------------------------------------------


def test_a_kfp_store_model_without_credentials_is_refused_before_any_write(
        exported_model, synthetic_dataset, monkeypatch):
    from kubernetes.config import kube_config

    from fmnist_kfp.kfp_components.deploy.step import deploy as deploy_step

    with KServeStandIn() as standin:  # the step finds the cluster through the kubeconfig
        monkeypatch.setenv("KUBECONFIG", str(standin.kubeconfig(NS)))
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION",
                            str(standin.kubeconfig(NS)))
        with pytest.raises(UserInputError, match="manifests/serving-credentials"):
            deploy_step(model_dir=str(exported_model),
                        model_uri="minio://mlpipeline/v2/artifacts/p/run/select/best_model",
                        test_accuracy=0.9, data_dir=str(synthetic_dataset),
                        backend="kubernetes", model_name=NAME, tolerance=0.005,
                        verification_images=8, serving={"namespace": NS, "image": IMAGE},
                        log=lambda line: None)
        assert not standin.isvc_writes()


# -- item 6: deployment modes ----------------------------------------------------------------


def test_standard_mode_never_touches_the_served_model_for_a_bad_candidate():
    """canaryTrafficPercent is ignored in raw mode (kserve#5335): writing the canary to the
    served InferenceService rolls the bad model out to every replica."""
    with KServeStandIn(default_mode="RawDeployment") as standin:
        # Judged on its own, whatever address it is verified at (item 3 is tested above).
        verifier = Verifier(standin, {OLD: 0.90, NEW: 0.40},
                            outside=f"http://{NAME}-predictor.{NS}.svc.cluster.local")
        deploy(standin, OLD, 0.90, verifier)
        result = deploy(standin, NEW, 0.95, verifier)
        puts = [body for method, body in standin.isvc_writes()
                if method == "PUT" and body["metadata"]["name"] == NAME]
        assert not puts
        assert result.action is not Action.ROLLED_BACK  # nothing was rolled back
        assert standin.answering(f"http://{NAME}-predictor.{NS}.svc.cluster.local")[0] == OLD


def test_a_metric_knatives_autoscaler_refuses_is_refused_before_any_write():
    with KServeStandIn() as standin:
        with pytest.raises(UserInputError, match="Serverless"):
            deploy(standin, OLD, 0.9, Verifier(standin, {}), scale_metric="cpu")
        assert not standin.isvc_writes()
