"""Every object the package builds, created on the real kube-apiserver (v1.34.1, tests/cluster.py)
with the upstream CRDs installed: server-side dry run (nothing is stored, no controller runs) with
strict field validation, so the API server's own validation of metadata (names, label and
annotation keys and values), its CRD schemas, their CEL rules and its defaulting judge each one,
as they judge it on a cluster. A Katib trial's job is created as Katib creates it: the trial
template with the trial's values in its placeholders (kubeflow/katib v0.19.0
pkg/controller.v1beta1/experiment/manifest/generator.go, ``GetRunSpecWithHyperParameters``).

The label key ``fmnist_kfp/model-type`` that three builders used is what this test was written
to catch: the API server answers 422 to every TFJob, TrainJob and trial job carrying it.
"""

from __future__ import annotations

import json
import re

import pytest

from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.experiment import build_experiment
from fmnist_kfp.kubernetes.inference_service import build_inference_service
from fmnist_kfp.kubernetes.inference_service_status import SERVERLESS, STANDARD, DeploymentMode
from fmnist_kfp.kubernetes.job import build_indexed_job
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.serving_runtime import build_serving_runtime
from fmnist_kfp.kubernetes.tensorboard import build_tensorboard
from fmnist_kfp.kubernetes.tfjob import build_tfjob
from fmnist_kfp.kubernetes.trainjob import OVERRIDES, build_trainjob
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.serving import KServeSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from fmnist_kfp.tuning.experiment_settings import ExperimentSettings
from fmnist_kfp.tuning.search_space import SearchSpace

NAMESPACE = "team-a"
IMAGE = "registry.example.com/ml/fmnist-kfp:0.2.0"
GPU_IMAGE = "registry.example.com/ml/fmnist-kfp:0.2.0-gpu"
SCHEDULING = {
    "none": {},
    "kueue": {"queue": "team-a", "priority_class": "fmnist-high"},
    "volcano": {"gang": "volcano", "gang_queue": "research"},
    "scheduler-plugins": {"gang": "scheduler-plugins", "gang_timeout_seconds": 300},
}


@pytest.fixture(scope="module")
def cluster(real_cluster):
    real_cluster.ensure_namespace(NAMESPACE)
    return real_cluster


def _settings(**overrides) -> KubernetesSettings:
    return KubernetesSettings(**{"image": IMAGE, "gpu_image": GPU_IMAGE, "namespace": NAMESPACE,
                                 "pvc_name": "fmnist-pvc", **overrides})


def _training(model_type: str = "batchnorm", **overrides) -> TrainingJobSpec:
    values = dict(name=f"fmnist-{model_type}-run-1", config=TrainingConfig(model_type=model_type),
                  data_dir="/mnt/fmnist/dataset", export_dir="/mnt/fmnist/models/m/1",
                  work_dir="/mnt/fmnist/models/m", num_workers=2)
    return TrainingJobSpec(**{**values, **overrides})


def _accepted(cluster, manifest: dict) -> dict:
    created = cluster.create(manifest, namespace=NAMESPACE, dry_run=True)
    assert created["metadata"]["name"] == manifest["metadata"]["name"]
    return created


@pytest.mark.parametrize("scheduling", list(SCHEDULING))
@pytest.mark.parametrize("variant", ["workers", "chief-gpu", "parameter-server", "object-store"])
def test_every_tfjob_is_accepted(cluster, variant, scheduling):
    spec = {"workers": _training(),
            "chief-gpu": _training(use_chief=True, gpus_per_worker=1),
            "parameter-server": _training(strategy="parameter_server", num_ps=2,
                                          evaluator=True),
            "object-store": _training("basic")}[variant]
    storage = ({"pvc_name": "", "object_store_secret": "fmnist-s3-credentials"}
               if variant == "object-store" else {})
    manifest = to_manifest(build_tfjob(spec, _settings(
        scheduling=SCHEDULING[scheduling], active_deadline_seconds=7200, **storage)))
    created = _accepted(cluster, manifest)
    assert created["metadata"]["labels"][keys.MODEL_TYPE] == spec.config.model_type


@pytest.mark.parametrize("gpus", [0, 1])
def test_every_trainjob_is_accepted(cluster, gpus):
    # The cluster has Trainer v2.1.0's TrainJob CRD (../shared/crds/trainer-v2), so its shape.
    # A Kueue queue needs Trainer 2.2's runtimePatches, and a TrainJob's gang is its runtime's:
    # both are refused before any work (tests/fmnist_kfp/kubernetes/test_trainjob.py).
    manifest = build_trainjob(_training(gpus_per_worker=gpus), _settings(), OVERRIDES)
    created = _accepted(cluster, manifest)
    assert created["metadata"]["labels"][keys.MODEL_TYPE] == "batchnorm"


def _trial_job(experiment: dict) -> dict:
    """The job Katib creates for a trial: the template with each placeholder replaced by a
    value of its parameter (generator.go: ``${trialParameters.<name>}`` replaced in the
    template's JSON), named after the trial in the experiment's namespace."""
    template = experiment["spec"]["trialTemplate"]
    values = {"model_type": "dropout", "learning_rate": "0.004", "filters": "32",
              "dense_units": "96", "dropout": "0.25", "batch_size": "128"}
    text = json.dumps(template["trialSpec"])
    for parameter in template["trialParameters"]:
        value = values.get(parameter["reference"], "1")
        text = text.replace(f"${{trialParameters.{parameter['name']}}}", value)
    assert not re.search(r"\$\{trialParameters\.", text)
    job = json.loads(text)
    job["metadata"] = {**job.get("metadata", {}), "name": "fmnist-tune-abcd1234"}
    return job


@pytest.mark.parametrize("operator", ["tfjob", "trainjob"])
@pytest.mark.parametrize("model_type", ["dropout", "searched"])
def test_every_experiment_and_its_trial_jobs_are_accepted(cluster, operator, model_type):
    kubernetes = _settings()
    settings = ExperimentSettings(name="fmnist-tune", kubernetes=kubernetes,
                                  model_type="dropout")
    space = SearchSpace.default(settings.algorithm, settings.model_type)
    if model_type == "searched":  # the model type a trial parameter, and a trial-job label
        space = SearchSpace.default(settings.algorithm, "")
    experiment = to_manifest(build_experiment(settings, space, "/mnt/fmnist/dataset", operator,
                                              OVERRIDES))
    _accepted(cluster, experiment)
    trial_job = _trial_job(experiment)
    created = _accepted(cluster, trial_job)
    labels = created["metadata"].get("labels", {})
    if "model_type" in space.names:
        assert labels[keys.MODEL_TYPE] == "dropout"


def test_the_batch_prediction_job_is_accepted(cluster):
    spec = ScoringJobSpec(name="fmnist-batch-0123456789", model_dir="/mnt/fmnist/batch/x/model",
                          data_dir="/mnt/fmnist/datasets/abc",
                          output_dir="/mnt/fmnist/batch/x/out", num_shards=3)
    _accepted(cluster, to_manifest(build_indexed_job(spec, _settings())))


def test_the_tensorboard_is_accepted(cluster):
    _accepted(cluster, build_tensorboard("fmnist-tensorboard", NAMESPACE,
                                         "pvc://fmnist-pvc/runs/7/logs",
                                         labels={keys.MODEL_TYPE: "basic"}))


@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment", "Standard"])
@pytest.mark.parametrize("canary", [None, 10])
def test_every_inference_service_is_accepted(cluster, mode, canary):
    deployment_mode = (DeploymentMode(SERVERLESS, None, "test") if mode == "Serverless"
                       else DeploymentMode(STANDARD, mode, "test"))
    if canary is not None and mode != "Serverless":
        pytest.skip("a canary share is Serverless's (Standard mode verifies a candidate)")
    settings = KServeSettings(namespace=NAMESPACE, image=IMAGE)
    isvc = to_manifest(build_inference_service(
        settings, storage_uri="pvc://fmnist-pvc/models/fmnist", canary_traffic_percent=canary,
        annotations={keys.key("model-uri"): "pvc://fmnist-pvc/models/fmnist",
                     keys.key("test-accuracy"): "0.9312"},
        mode=deployment_mode))
    _accepted(cluster, isvc)


def test_the_serving_runtime_is_accepted(cluster):
    runtime = to_manifest(build_serving_runtime(KServeSettings(namespace=NAMESPACE,
                                                               image=IMAGE)))
    _accepted(cluster, runtime)


def test_the_serve_early_claim_is_accepted(cluster):
    from fmnist_kfp.serving.deploy import kserve_promotion

    made = []

    class Api:  # what _write_claim sends, sent on to the real API server
        namespace = NAMESPACE

        def create_claim(self, body):
            made.append(body)
            return body

    kserve_promotion._write_claim(Api(), KServeSettings(namespace=NAMESPACE, image=IMAGE,
                                                        name="fmnist"),
                                  None, {kserve_promotion.CLAIM_MODEL_URI: "pvc://x/m"})
    [claim] = made
    _accepted(cluster, claim)


@pytest.mark.parametrize("key", ["fmnist_kfp/model-type", "Fmnist.io/x", "a/b/c",
                                 "fmnist.kubeflow.org/-x", "x" * 64])
def test_a_key_the_api_server_refuses_is_refused_where_it_is_made(cluster, key):
    """The rule of keys.qualified_name_problem is the API server's: each key it names is
    refused by the real server too, and a key it passes is accepted."""
    assert keys.qualified_name_problem(key)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "label-probe", "labels": {key: "v"}}}
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        cluster.create(config_map, namespace=NAMESPACE, dry_run=True)
    assert refused.value.status == 422
    config_map["metadata"]["labels"] = {keys.MODEL_TYPE: "v"}
    _accepted(cluster, config_map)
