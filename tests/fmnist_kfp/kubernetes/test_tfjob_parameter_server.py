"""TFJobs of parameter-server jobs and with an evaluator: strict CRD validation, replicas,
resources, cleanPodPolicy, Katib trial templates. (A PS job with an evaluator trains on the real
Training Operator: tests/fmnist_kfp/launcher/test_tfjob_on_the_cluster.py.)

Rules relied on (kubeflow/trainer v1.9.2):

* ``pkg/apis/kubeflow.org/v1/tensorflow_types.go`` lines 106-122: replica types ``PS``,
  ``Worker``, ``Chief``, ``Master``, ``Evaluator``;
* ``pkg/controller.v1/tensorflow/tfjob_controller.go`` ``UpdateJobStatus`` lines 444-458: with a
  Chief the job succeeds when the chief does (PS, Worker, Evaluator do not count);
* ``pkg/controller.v1/common/job.go`` ``DeletePodsAndServices`` lines 40-66 and
  ``tensorflow_defaults.go`` lines 52-53: cleanPodPolicy defaults to None, which deletes no pod
  of a finished job, so PS pods (which never exit) would run on; Running deletes them;
* ``pkg/controller.v1/tensorflow/tensorflow.go`` ``genClusterSpec`` lines 157-184: every
  replica type, evaluator included, is in every pod's TF_CONFIG cluster;
* ``pkg/controller.v1/common/util.go`` ``GenGeneralName`` lines 50-53: pods and Services are
  ``<job>-<type>-<index>``, Service names DNS-1035 labels of at most 63 characters.
"""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.tfjob import build_tfjob
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import validate_strict

CRD = "tfjob.kubeflow.org_v1.yaml"


def _spec(**overrides) -> TrainingJobSpec:
    values = dict(
        name="fmnist-batchnorm-ps", config=TrainingConfig(model_type="batchnorm"),
        data_dir="/mnt/fmnist/dataset", export_dir="/mnt/fmnist/models/bn/1",
        work_dir="/mnt/fmnist/models/bn", num_workers=2, strategy="parameter_server", num_ps=2,
    )
    values.update(overrides)
    return TrainingJobSpec(**values)


IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
GPU_IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0-gpu"


def _settings(**overrides) -> KubernetesSettings:
    return KubernetesSettings(image=IMAGE, gpu_image=GPU_IMAGE, namespace="team-a",
                              pvc_name="fmnist-pvc", **overrides)


def _container(manifest: dict, kind: str) -> dict:
    return manifest["spec"]["tfReplicaSpecs"][kind]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("gpus", [0, 1])
@pytest.mark.parametrize("evaluator", [False, True])
def test_a_parameter_server_tfjob_passes_strict_crd_validation(gpus, evaluator):
    manifest = to_manifest(build_tfjob(_spec(gpus_per_worker=gpus, evaluator=evaluator),
                                       _settings(ps_cpu="500m", ps_memory="1Gi")))
    validate_strict(manifest, CRD, "v1")
    replicas = manifest["spec"]["tfReplicaSpecs"]
    expected = {"Chief": 1, "Worker": 2, "PS": 2} | ({"Evaluator": 1} if evaluator else {})
    assert {kind: spec["replicas"] for kind, spec in replicas.items()} == expected
    assert _container(manifest, "PS")["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "500m", "memory": "1Gi"}}
    # Only the workers compute: the coordinator, PS and evaluator get no GPU.
    assert ("nvidia.com/gpu" in _container(manifest, "Worker")["resources"]["limits"]) == bool(
        gpus)
    for kind in set(expected) - {"Worker"}:
        assert "nvidia.com/gpu" not in _container(manifest, kind)["resources"]["limits"]
        assert "nodeSelector" not in replicas[kind]["template"]["spec"]
        assert _container(manifest, kind)["image"] == IMAGE  # no CUDA where no GPU
    assert _container(manifest, "Worker")["image"] == (GPU_IMAGE if gpus else IMAGE)
    # Every replica runs the same trainer command: the TF_CONFIG task type picks its role.
    commands = {tuple(_container(manifest, kind)["command"]) for kind in replicas}
    assert len(commands) == 1
    assert manifest["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert "successPolicy" not in manifest["spec"]  # with a Chief, the chief's success decides


def test_an_evaluator_on_a_mirrored_job_passes_strict_crd_validation():
    manifest = to_manifest(build_tfjob(
        _spec(strategy="multi_worker_mirrored", num_ps=0, evaluator=True), _settings()))
    validate_strict(manifest, CRD, "v1")
    assert {k: v["replicas"] for k, v in manifest["spec"]["tfReplicaSpecs"].items()} == {
        "Worker": 2, "Evaluator": 1}
    # The evaluator runs the trainer's command too: the TF_CONFIG task type makes it score.
    assert _container(manifest, "Evaluator")["command"] == _container(manifest,
                                                                      "Worker")["command"]


def test_clean_pod_policy_none_is_refused_for_a_parameter_server_job():
    with pytest.raises(UserInputError, match="set clean_pod_policy to Running"):
        ClusterJob(_spec(), _settings(clean_pod_policy="None"), "tfjob")


def test_the_longest_pod_name_counts_the_evaluator():
    name = "a" * 51  # "-evaluator-0" makes 63
    build_tfjob(_spec(name=name, evaluator=True), _settings())
    with pytest.raises(UserInputError, match=f"'{name}a-evaluator-0' would exceed 63"):
        ClusterJob(_spec(name=name + "a", evaluator=True), _settings(), "tfjob")


def test_ps_resources_are_checked_like_the_others():
    problems = KubernetesSettings(image="x:1", ps_memory="lots").problems()
    assert any("ps_memory" in p for p in problems), problems


def test_a_katib_trial_template_gets_the_same_replicas():
    """The trial TFJob is the training step's, PS and Chief included; the Experiment passes the
    Katib schema and our copy of its webhook rules, the trial spec the TFJob CRD."""
    from fmnist_kfp.kubernetes.experiment import build_experiment
    from fmnist_kfp.kubernetes.experiment_webhook import webhook_problems
    from fmnist_kfp.kubernetes.manifest import to_manifest as experiment_manifest
    from fmnist_kfp.tuning.experiment_settings import ExperimentSettings
    from fmnist_kfp.tuning.search_space import SearchSpace
    from tests.katib_schemas import validate_katib

    settings = ExperimentSettings(name="fmnist-tune-bn", num_workers=2,
                                  strategy="parameter_server", num_ps=1,
                                  kubernetes=_settings())
    manifest = experiment_manifest(build_experiment(
        settings, SearchSpace.default(settings.algorithm, "batchnorm"), "/mnt/fmnist/dataset"))
    validate_katib(manifest)
    assert webhook_problems(manifest) == []
    trial = manifest["spec"]["trialTemplate"]["trialSpec"]
    validate_strict(trial, CRD, "v1")
    replicas = trial["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "Worker": 2, "PS": 1}
    assert trial["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_a_katib_experiment_without_ps_for_parameter_server_is_refused():
    from fmnist_kfp.tuning.experiment_settings import ExperimentSettings

    settings = ExperimentSettings(name="fmnist-tune-bn", strategy="parameter_server", num_ps=0)
    assert any("set num_ps to 1 or more" in p for p in settings.search_problems())


def test_a_local_trial_of_a_parameter_server_search_is_scored_from_the_chief():
    """Locally, as on Katib (whose collector reads the job-role=master pod, the Chief), a PS
    trial's objective comes from the coordinator's epoch lines."""
    from fmnist_kfp.katib.optuna_search import _EpochCollector
    from fmnist_kfp.tuning.experiment_settings import ExperimentSettings

    settings = ExperimentSettings(name="fmnist-tune-bn", num_workers=2,
                                  strategy="parameter_server", num_ps=1)
    assert _EpochCollector(object(), settings).chief == "chief-0"
    assert _EpochCollector(object(), ExperimentSettings(name="fmnist-tune-bn")).chief == \
        "worker-0"
