"""Katib Experiments for tuning the trainer: every variant the code builds passes Katib's types
(../shared/crds/katib_v1beta1_swagger.json), its trial TFJob passes the real TFJob CRD, and the
checks of Katib's admission webhook; bad input fails early with the problem named."""

from __future__ import annotations

import copy
import io
import itertools
from pathlib import Path

import jsonschema
import pytest

import fmnist_kfp.training.trainer as trainer_module
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.experiment import build_experiment
from fmnist_kfp.kubernetes.experiment_webhook import webhook_problems
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.trainjob import OVERRIDES, PATCHES
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.tuning.experiment_settings import (
    METRICS_FILTER,
    REPORTED_METRICS,
    EarlyStopping,
    ExperimentSettings,
)
from fmnist_kfp.tuning.search_space import ALGORITHMS, Parameter, SearchSpace
from tests.crd_schemas import validate_strict
from tests.katib_schemas import validate_katib
from tests.standins.katib import ZERO_TIME, collect, observation

DATA_DIR = "/mnt/fmnist/dataset"


IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
GPU_IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0-gpu"


def _settings(**overrides) -> ExperimentSettings:
    kubernetes = KubernetesSettings(image=IMAGE, gpu_image=GPU_IMAGE, namespace="team-a",
                                    pvc_name="fmnist-pvc")
    values = dict(name="fmnist-tune", kubernetes=kubernetes, model_type="dropout")
    values.update(overrides)
    return ExperimentSettings(**values)


def _manifest(settings: ExperimentSettings, space: SearchSpace | None = None) -> dict:
    space = space or SearchSpace.default(settings.algorithm, settings.model_type)
    return to_manifest(build_experiment(settings, space, DATA_DIR))


def _containers(manifest: dict) -> list[dict]:
    replicas = manifest["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]
    return [c for r in replicas.values() for c in r["template"]["spec"]["containers"]]


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _epoch_line(epoch: int, epochs: int, logs: dict[str, float], when: float) -> str:
    """The trainer's own epoch line (fmnist_kfp.training.trainer.epoch_line, what EpochReport
    prints), for the history entry EpochReport builds."""
    entry = {"epoch": epoch, **logs, "seconds": 12.345, "finished_at": when,
             "images_per_second": 4321.0}
    return trainer_module.epoch_line(entry, epochs, when)


@pytest.mark.parametrize(
    ("algorithm", "early_stopping", "batch", "gpus"),
    list(itertools.product(ALGORITHMS, [False, True], ["categorical", "int"], [0, 1])),
)
def test_every_experiment_variant_passes_katib_and_the_tfjob_crd(algorithm, early_stopping,
                                                                  batch, gpus):
    settings = _settings(
        algorithm=algorithm, gpus_per_worker=gpus, num_workers=2,
        early_stopping=EarlyStopping(min_trials_required=3, start_step=4)
        if early_stopping else None,
    )
    space = SearchSpace.default(algorithm, "dropout")
    space = space.with_parameter(
        Parameter.categorical("batch_size", [32, 64, 128, 256]) if batch == "categorical"
        else Parameter.integer("batch_size", 32, 256, step=32)
    )
    manifest = _manifest(settings, space)

    validate_katib(manifest)
    validate_strict(manifest["spec"]["trialTemplate"]["trialSpec"],
                    "tfjob.kubeflow.org_v1.yaml", "v1")
    assert webhook_problems(manifest) == []

    spec = manifest["spec"]
    assert spec["algorithm"]["algorithmName"] == algorithm
    assert ("earlyStopping" in spec) == early_stopping
    assert spec["objective"]["objectiveMetricName"] == "val_accuracy"
    assert spec["objective"]["type"] == "maximize"
    assert spec["metricsCollectorSpec"]["collector"]["kind"] == "StdOut"
    template = spec["trialTemplate"]
    assert template["primaryContainerName"] == "tensorflow"
    assert template["primaryPodLabels"] == {"training.kubeflow.org/job-role": "master"}
    assert "name" not in template["trialSpec"]["metadata"]  # Katib names each trial's TFJob
    # Worker only: the operator labels Worker 0 master, the one pod Katib collects from.
    assert set(template["trialSpec"]["spec"]["tfReplicaSpecs"]) == {"Worker"}
    for container in _containers(manifest):
        command = container["command"]
        assert "--evaluate-test-split" not in command  # trials never see the test split
        # Trials score on the dataset's validation split: no flag can move it.
        assert "--validation-examples" not in command
        for name in space.names:
            assert _flag(command, "--" + name.replace("_", "-")) == \
                "${trialParameters." + name + "}"
        assert "${trialParameters.trialName}" in _flag(command, "--work-dir")
        assert ("nvidia.com/gpu" in container["resources"]["limits"]) == bool(gpus)
        assert container["image"] == (GPU_IMAGE if gpus else IMAGE)  # trials with GPUs: CUDA
    by_name = {p["name"]: p for p in spec["parameters"]}
    assert by_name["learning_rate"]["feasibleSpace"].get("distribution") == (
        None if algorithm in ("grid", "cmaes") else "logUniform")
    assert all(isinstance(v, str) for p in spec["parameters"]
               for k, v in p["feasibleSpace"].items() if k != "list")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_default_space_of_the_default_model_builds_for_every_algorithm(algorithm):
    settings = _settings(algorithm=algorithm, model_type="batchnorm", use_chief=True)
    manifest = _manifest(settings)
    validate_katib(manifest)
    validate_strict(manifest["spec"]["trialTemplate"]["trialSpec"],
                    "tfjob.kubeflow.org_v1.yaml", "v1")
    assert webhook_problems(manifest) == []
    assert "dropout_rate" not in {p["name"] for p in manifest["spec"]["parameters"]}
    replicas = manifest["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]
    assert replicas["Chief"]["replicas"] == 1  # with a Chief, it is the one master pod


def test_the_collector_parses_the_trainers_epoch_lines_into_the_objective():
    source = Path(trainer_module.__file__).read_text()
    # Where val_accuracy comes from: Keras prefixes the "accuracy" metric with val_ when fit()
    # has validation data; EpochReport prints epoch_line.
    for fragment in ('SparseCategoricalAccuracy(name="accuracy")', "epoch_line(entry",
                     "validation_data=validation_data",
                     'scored_split = "test" if evaluate_test_split else "validation"'):
        assert fragment in source, f"the trainer no longer contains {fragment!r}"

    manifest = _manifest(_settings(early_stopping=EarlyStopping()))
    objective = manifest["spec"]["objective"]
    metrics = [objective["objectiveMetricName"], *objective["additionalMetricNames"]]
    assert set(metrics) <= set(REPORTED_METRICS)
    (pattern,) = manifest["spec"]["metricsCollectorSpec"]["source"]["filter"]["metricsFormat"]
    assert pattern == METRICS_FILTER

    epochs = 10
    log = ["worker-0: training dropout (93,322 parameters) on 54,000 images, 1 replica(s), "
           "global batch 64, float32", "resumed_from_epoch=1"]
    for epoch in range(1, epochs + 1):
        log.append(_epoch_line(epoch, epochs, {
            "loss": 0.5 / epoch, "accuracy": 0.8 + epoch / 100,
            "val_loss": 0.6 / epoch, "val_accuracy": 0.79 + epoch / 100,
        }, when=1.7e9 + 30 * epoch + 0.25))
    assert log[2] == ("2023-11-14T22:13:50.250000Z epoch=1 epochs=10 loss=0.5000 "
                      "accuracy=0.8100 val_loss=0.6000 val_accuracy=0.8000 seconds=12.3450 "
                      "images_per_second=4321.0000")
    records = collect(log, metrics, pattern)
    objective_values = [v for _, n, v in records if n == "val_accuracy"]
    # One report per epoch: what median stopping's start_step counts.
    assert objective_values == [f"{0.79 + e / 100:.4f}" for e in range(1, epochs + 1)]
    # Every report carries its own time (not Go's zero time): "latest" is the last epoch
    # whatever order the database returns the rows in.
    stamps = [stamp for stamp, n, _ in records if n == "val_accuracy"]
    assert ZERO_TIME not in stamps and stamps == sorted(set(stamps))
    for rows in (records, list(reversed(records))):
        [found] = [m for m in observation(rows, metrics) if m["name"] == "val_accuracy"]
        assert found["latest"] == "0.8900" and found["max"] == "0.89"


def test_without_timestamps_latest_would_depend_on_row_order():
    """Why the timestamp: lines without one all get 0001-01-01T00:00:00Z and "latest" is
    whichever tied row the database returns last."""
    log = ["epoch=1 val_accuracy=0.9000", "epoch=2 val_accuracy=0.8000"]
    records = collect(log, ["val_accuracy"], METRICS_FILTER)
    assert {stamp for stamp, _, _ in records} == {ZERO_TIME}
    latest = {observation(rows, ["val_accuracy"])[0]["latest"]
              for rows in (records, list(reversed(records)))}
    assert latest == {"0.8000", "0.9000"}


def test_strict_validation_catches_a_misspelt_field():
    manifest = _manifest(_settings())
    validate_katib(manifest)
    broken = copy.deepcopy(manifest)
    broken["spec"]["objective"]["objectiveMetricNmae"] = "val_accuracy"
    with pytest.raises(jsonschema.ValidationError, match="objectiveMetricNmae"):
        validate_katib(broken)
    broken = copy.deepcopy(manifest)
    broken["spec"]["parameters"][0]["feasibleSpace"]["min"] = 0.0001  # must be a string
    with pytest.raises(jsonschema.ValidationError, match="string"):
        validate_katib(broken)


def test_webhook_checks_catch_broken_manifests():
    manifest = _manifest(_settings())
    cases = {
        "not found in the trial template": lambda m: m["spec"]["trialTemplate"][
            "trialParameters"].append({"name": "seed", "reference": "learning_rate_2"}),
        "not in spec.parameters": lambda m: m["spec"]["trialTemplate"]["trialParameters"][0]
        .update(reference="lr"),
        "are not in trialParameters": lambda m: _containers(m)[0]["command"].extend(
            ["--seed", "${trialParameters.seed}"]),
        "must be below max": lambda m: m["spec"]["parameters"][0]["feasibleSpace"].update(
            min="0.01"),
        "must be omitted": lambda m: m["spec"]["trialTemplate"]["trialSpec"]["metadata"]
        .update(name="fixed"),
        "parallelTrialCount": lambda m: m["spec"].update(parallelTrialCount=20),
        "algorithmName 'annealing'": lambda m: m["spec"]["algorithm"].update(
            algorithmName="annealing"),
        "must not be empty": lambda m: m["spec"]["parameters"][1]["feasibleSpace"].update(
            list=[]),
        "two top subexpressions": lambda m: m["spec"]["metricsCollectorSpec"]["source"][
            "filter"].update(metricsFormat=[r"val_accuracy=\d+"]),
        "must not contain the objective": lambda m: m["spec"]["objective"][
            "additionalMetricNames"].append("val_accuracy"),
    }
    for expected, breaks in cases.items():
        broken = copy.deepcopy(manifest)
        breaks(broken)
        problems = webhook_problems(broken)
        assert any(expected in p for p in problems), (expected, problems)


def _space(*changes: Parameter) -> SearchSpace:
    space = SearchSpace.default("tpe", "dropout")
    for change in changes:
        space = space.with_parameter(change)
    return space


@pytest.mark.parametrize(
    ("settings_changes", "space", "message"),
    [
        ({}, _space(Parameter.double("dropout_rate", 0.3, 0.3)), r"\[0.3, 0.3\] is empty"),
        ({}, _space(Parameter.integer("filters", 64, 16)), r"\[64, 16\] is inverted"),
        ({}, _space(Parameter.categorical("filters", [])), "categorical list is empty"),
        ({}, _space(Parameter.categorical("filters", [16, 16])), "duplicate categorical"),
        ({}, _space(Parameter.double("dropout_rate", 0.1, 0.6, step=0)), "step must be positive"),
        ({"algorithm": "annealing"}, None, "unknown algorithm 'annealing'; choose one of"),
        ({"algorithm": "tpe", "algorithm_settings": {"n_startup_trials": 5}}, None,
         "unknown setting 'n_startup_trials' for algorithm tpe"),
        ({"max_trial_count": 2, "parallel_trial_count": 4}, None,
         r"max_trial_count \(2\) is below parallel_trial_count \(4\)"),
        ({"objective_metric": "test_accuracy"}, None,
         "does not report objective metric 'test_accuracy'; it reports loss, accuracy, "
         "val_loss, val_accuracy"),
        ({"algorithm": "grid", "max_trial_count": 6}, _space(),
         "algorithm grid needs a step for every double parameter.*give dropout_rate a step"),
        ({}, _space(Parameter.double("momentum", 0.8, 0.99)),
         "unknown hyperparameter 'momentum'.*learning_rate"),
        ({"resume_policy": "Sometimes"}, None, "unknown resume policy 'Sometimes'; choose one "
         "of Never, LongRunning, FromVolume"),
        ({}, _space(Parameter.double("learning_rate", 1e-3, 2.0)),
         r"learning_rate must be in \(0, 1\], got 2.0"),
        ({}, _space(Parameter.double("dropout_rate", 0.5, 1.0)),
         r"dropout_rate must be in \[0, 1\), got 1.0"),
        ({}, _space(Parameter.double("batch_size", 32.0, 64.0)),
         "batch_size takes integer values, not a double range: use an int or categorical"),
        ({}, _space(Parameter.double("learning_rate", 0.0, 1e-3, log=True)),
         "logUniform range needs low > 0"),
        ({"model_type": "batchnorm"}, _space(), "dropout_rate is searched but model type "
         "batchnorm has no dropout layer"),
        ({}, _space(Parameter.integer("validation_examples", 1000, 5000)),
         "unknown hyperparameter 'validation_examples'"),
        ({"algorithm": "cmaes"}, SearchSpace([Parameter.double("learning_rate", 1e-4, 1e-2)]),
         "cmaes needs two or more double or int parameters"),
        ({"algorithm": "bayesianoptimization"}, _space(Parameter.double("dropout_rate", 0, .5)),
         "bayesianoptimization samples every double log-uniformly"),
        ({"algorithm": "grid", "max_trial_count": 500}, SearchSpace.default("grid", "dropout"),
         r"max_trial_count \(500\) exceeds the grid's 144 combinations"),
        ({"early_stopping": EarlyStopping(start_step=10)}, None, "start_step 10 is not below "
         "the fewest epochs"),
        ({"name": "Fmnist_Tune"}, None, "experiment name 'Fmnist_Tune' must start with"),
        ({"additional_metrics": ("val_accuracy",)}, None, "val_accuracy is the objective"),
        ({"kubernetes": KubernetesSettings(image="fmnist", pvc_name="p")}, None, "has no tag"),
        ({"kubernetes": KubernetesSettings(image="fmnist:1")}, None, "shared storage"),
        ({}, SearchSpace([]), "the search space is empty"),
    ],
)
def test_bad_input_fails_naming_the_problem(settings_changes, space, message):
    settings = _settings(**settings_changes)
    with pytest.raises(UserInputError, match=message):
        build_experiment(settings, space or SearchSpace.default("tpe", "dropout"), DATA_DIR)


def test_grid_counts_combinations_as_katib_does():
    space = SearchSpace.default("grid", "dropout")
    # 4 learning rates × 4 batch sizes × 3 filter counts × dropout 0.2, 0.35, 0.5
    assert space.grid_size() == 4 * 4 * 3 * 3
    assert Parameter.double("x", 0.1, 0.6, step=0.25).grid_values() == 3
    assert Parameter.integer("batch_size", 32, 256, step=32).grid_values() == 8


def test_a_searched_model_type_labels_the_trial_and_allows_dropout():
    space = _space(Parameter.categorical("model_type", ["dropout", "batchnorm"]))
    manifest = _manifest(_settings(model_type="batchnorm"), space)
    assert webhook_problems(manifest) == []
    labels = manifest["spec"]["trialTemplate"]["trialSpec"]["metadata"]["labels"]
    assert labels["fmnist.kubeflow.org/model-type"] == "${trialParameters.model_type}"


def test_the_object_store_layout_and_fixed_hyperparameters():
    from fmnist_kfp.settings.training import TrainingConfig

    settings = _settings(output_dir="s3://fmnist/katib/",
                         base_config=TrainingConfig(epochs=6, precision="float32"),
                         kubernetes=KubernetesSettings(image="fmnist:1", namespace="team-a",
                                                       object_store_secret="s3-creds"))
    manifest = _manifest(settings)
    (container,) = _containers(manifest)
    command = container["command"]
    assert _flag(command, "--work-dir") == "s3://fmnist/katib/fmnist-tune/" \
        "${trialParameters.trialName}"
    assert _flag(command, "--export-dir").endswith("/${trialParameters.trialName}/1")
    assert _flag(command, "--epochs") == "6"
    assert _flag(command, "--precision") == "float32"
    assert "--validation-examples" not in command


def test_the_whole_experiment_but_its_trial_tfjob():
    """Every field of the Experiment (the trial TFJob has its own tests), so that no setting
    silently stops reaching Katib."""
    manifest = _manifest(_settings(
        algorithm_settings={"random_state": 7}, objective_goal=0.93,
        early_stopping=EarlyStopping(min_trials_required=3, start_step=2), max_trial_count=12,
        parallel_trial_count=3, max_failed_trial_count=2, retain_trials=True,
        resume_policy="LongRunning"))
    trial_spec = manifest["spec"]["trialTemplate"].pop("trialSpec")
    assert trial_spec["kind"] == "TFJob"
    strategies = [{"name": m, "value": "latest"}
                  for m in ("val_accuracy", "val_loss", "accuracy", "loss")]
    assert manifest == {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
        "metadata": {"name": "fmnist-tune", "namespace": "team-a",
                     "labels": {"app.kubernetes.io/part-of": "fmnist-kfp"}},
        "spec": {
            "algorithm": {"algorithmName": "tpe",
                          "algorithmSettings": [{"name": "random_state", "value": "7"}]},
            "earlyStopping": {"algorithmName": "medianstop", "algorithmSettings": [
                {"name": "min_trials_required", "value": "3"},
                {"name": "start_step", "value": "2"}]},
            "maxFailedTrialCount": 3,  # our budget of 2 means: fail at the third
            "maxTrialCount": 12,
            "parallelTrialCount": 3,
            "resumePolicy": "LongRunning",
            "metricsCollectorSpec": {"collector": {"kind": "StdOut"},
                                     "source": {"filter": {"metricsFormat": [METRICS_FILTER]}}},
            "objective": {"objectiveMetricName": "val_accuracy", "type": "maximize",
                          "goal": 0.93, "additionalMetricNames": ["val_loss", "accuracy", "loss"],
                          "metricStrategies": strategies},
            "parameters": [
                {"name": "learning_rate", "parameterType": "double",
                 "feasibleSpace": {"distribution": "logUniform", "min": "0.0003",
                                   "max": "0.01"}},
                {"name": "batch_size", "parameterType": "categorical",
                 "feasibleSpace": {"list": ["32", "64", "128", "256"]}},
                {"name": "filters", "parameterType": "categorical",
                 "feasibleSpace": {"list": ["16", "32", "64"]}},
                {"name": "dropout_rate", "parameterType": "double",
                 "feasibleSpace": {"min": "0.1", "max": "0.6"}},
            ],
            "trialTemplate": {
                "primaryContainerName": "tensorflow",
                "primaryPodLabels": {"training.kubeflow.org/job-role": "master"},
                "successCondition": 'status.conditions.#(type=="Succeeded")#|#(status=="True")#',
                "failureCondition": 'status.conditions.#(type=="Failed")#|#(status=="True")#',
                "retain": True,
                "trialParameters": [
                    {"name": "learning_rate", "reference": "learning_rate",
                     "description": "--learning-rate of the trainer"},
                    {"name": "batch_size", "reference": "batch_size",
                     "description": "--batch-size of the trainer"},
                    {"name": "filters", "reference": "filters",
                     "description": "--filters of the trainer"},
                    {"name": "dropout_rate", "reference": "dropout_rate",
                     "description": "--dropout-rate of the trainer"},
                    {"name": "trialName", "reference": "${trialSpec.Name}",
                     "description": "the trial's name: its own output directory"},
                ],
            },
        },
    }


@pytest.mark.parametrize(("early_stopping", "retain_trials", "retained"), [
    (None, False, False), (None, True, True), (EarlyStopping(), False, True),
    (EarlyStopping(), True, True)])
def test_early_stopping_keeps_the_trials_jobs_so_that_katib_reads_a_stopped_trial(
        early_stopping, retain_trials, retained):
    """Without ``retain`` Katib v0.19.0 deletes an early-stopped trial's job before it reads
    the trial's observation, then requests no new trial while that observation is missing
    (kubeflow/katib#1377): a trial stopped before the last would hang the search. Run on the
    real Katib in tests/katib/test_katib_on_the_cluster.py."""
    manifest = _manifest(_settings(early_stopping=early_stopping, retain_trials=retain_trials))
    assert manifest["spec"]["trialTemplate"].get("retain", False) is retained


@pytest.mark.parametrize(("budget", "most", "expected"), [(0, 4, 1), (2, 4, 3), (4, 4, 4),
                                                          (3, 4, 4)])
def test_the_failed_trial_budget_maps_to_katibs_count(budget, most, expected):
    """status_util.go v0.19.0 line 205: Katib fails at failed >= maxFailedTrialCount; its
    webhook wants maxFailedTrialCount <= maxTrialCount (validator.go lines 104-109)."""
    manifest = _manifest(_settings(max_failed_trial_count=budget, max_trial_count=most,
                                   parallel_trial_count=2))
    assert manifest["spec"]["maxFailedTrialCount"] == expected


def test_the_trial_tfjob_runs_the_trainer_under_trial_process_with_its_restart_budget():
    manifest = _manifest(_settings(max_restarts=3, num_workers=2))
    job = manifest["spec"]["trialTemplate"]["trialSpec"]
    assert "name" not in job["metadata"] and "namespace" not in job["metadata"]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 4
    for container in _containers(manifest):
        assert container["command"][:7] == ["python", "-m", "fmnist_kfp.katib.trial_process", "--",
                                            "python", "-m", "fmnist_kfp.training.trainer"]
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2


def test_a_searched_model_type_is_a_label_placeholder():
    space = SearchSpace.default("tpe", "dropout").with_parameter(
        Parameter.categorical("model_type", ["basic", "dropout"]))
    manifest = _manifest(_settings(), space)
    labels = manifest["spec"]["trialTemplate"]["trialSpec"]["metadata"]["labels"]
    assert labels["fmnist.kubeflow.org/model-type"] == "${trialParameters.model_type}"


def test_every_trial_pod_runs_as_the_image_user_with_fs_group_0_on_the_shared_volume():
    """Trials write their checkpoints and exports under katib/<experiment>/<trial>/ on the
    shared volume, which the tuning step made (group 0, setgid): so the trial TFJob's pods run
    as the image's user 1000 in group 0, with fsGroup 0 where the volume's driver applies it.
    Katib creates the trial's TFJob from trialSpec with only its placeholders, name and
    namespace replaced (kubeflow/katib v0.19.0 pkg/controller.v1beta1/experiment/manifest/
    generator.go 89-107, trial/trial_controller.go 295), and its pod webhook sets no pod-level
    securityContext (pkg/webhook/v1beta1/pod/inject_webhook.go 182-183 and 245-249 touch only
    shareProcessNamespace and the collector container's own), so the pod-level fields reach
    the pods, the metrics collector included. Valid for Katib's Experiment CRD and swagger and,
    strictly, for the TFJob CRD."""
    manifest = _manifest(_settings(num_workers=2, use_chief=True))
    validate_katib(manifest)
    trial = manifest["spec"]["trialTemplate"]["trialSpec"]
    validate_strict(trial, "tfjob.kubeflow.org_v1.yaml", "v1")
    assert webhook_problems(manifest) == []
    replicas = trial["spec"]["tfReplicaSpecs"]
    assert set(replicas) == {"Chief", "Worker"}
    for replica in replicas.values():
        assert replica["template"]["spec"]["securityContext"] == {
            "runAsUser": 1000, "runAsGroup": 0, "fsGroup": 0,
            "fsGroupChangePolicy": "OnRootMismatch"}


# -- trials as TrainJobs (kubernetes.operator trainjob: Kubeflow Trainer v2) --------------------
# Katib 0.19's defaults for a TrainJob trial, as kubeflow/katib v0.19.0 pkg/apis/controller/
# experiments/v1beta1/constants.go lines 39, 42 and 50 spell them (the Kubeflow SDK 0.5's
# OptimizerClient leaves them to these defaults: kubeflow 0.5.0 kubeflow/optimizer/backends/
# kubernetes/backend.py lines 117-153, primaryContainerName "node" only).
KATIB_TRAINJOB_SUCCESS = 'status.conditions.#(type=="Complete")#|#(status=="True")#'
KATIB_TRAINJOB_FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
KATIB_TRAINJOB_PRIMARY = {"jobset.sigs.k8s.io/replicatedjob-name": "node",
                          "batch.kubernetes.io/job-completion-index": "0"}
TRAINJOB_CRDS = {"podTemplateOverrides": "trainer-v2/trainjob.trainer.kubeflow.org_v1alpha1.yaml",
                 "runtimePatches": "trainer-v2.2.0/trainjob.trainer.kubeflow.org_v1alpha1.yaml"}


def _trainjob_manifest(settings: ExperimentSettings, shape: str = "podTemplateOverrides",
                       space: SearchSpace | None = None) -> dict:
    space = space or SearchSpace.default(settings.algorithm, settings.model_type)
    return to_manifest(build_experiment(settings, space, DATA_DIR, "trainjob", shape))


@pytest.mark.parametrize(("shape", "gpus", "early_stopping"),
                         list(itertools.product(TRAINJOB_CRDS, [0, 1], [False, True])))
def test_trainjob_trials_pass_katib_its_webhook_and_the_trainjob_crd(shape, gpus,
                                                                     early_stopping):
    """The Experiment against Katib's types, its CRD (../shared/crds) and its webhook's rules,
    its trial TrainJob against the
    TrainJob CRD of the Trainer whose shape it takes (v2.1.0: ../shared/crds/trainer-v2;
    v2.2.0: tests/crds/trainer-v2.2.0), strictly; the template as Katib 0.19 defaults a
    TrainJob's."""
    settings = _settings(num_workers=2, gpus_per_worker=gpus, early_stopping=EarlyStopping(
        min_trials_required=3, start_step=4) if early_stopping else None)
    manifest = _trainjob_manifest(settings, shape)
    validate_katib(manifest)
    validate_strict(manifest, "experiment.kubeflow.org_v1beta1.yaml", "v1beta1")
    assert webhook_problems(manifest) == []
    template = manifest["spec"]["trialTemplate"]
    trial = template["trialSpec"]
    validate_strict(trial, TRAINJOB_CRDS[shape], "v1alpha1")
    assert (trial["apiVersion"], trial["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert "name" not in trial["metadata"] and "namespace" not in trial["metadata"]
    assert shape in trial["spec"]
    assert trial["spec"]["runtimeRef"]["name"] == "fmnist-tensorflow"
    assert template["primaryContainerName"] == "node"
    assert template["primaryPodLabels"] == KATIB_TRAINJOB_PRIMARY
    assert template["successCondition"] == KATIB_TRAINJOB_SUCCESS
    assert template["failureCondition"] == KATIB_TRAINJOB_FAILURE
    trainer = trial["spec"]["trainer"]
    assert trainer["numNodes"] == 2
    assert trainer["image"] == (GPU_IMAGE if gpus else IMAGE)
    command = trainer["command"]
    assert command[:4] == ["python", "-m", "fmnist_kfp.katib.trial_process", "--"]
    for name in SearchSpace.default(settings.algorithm, settings.model_type).names:
        assert _flag(command, "--" + name.replace("_", "-")) == "${trialParameters." + name + "}"
    assert "${trialParameters.trialName}" in _flag(command, "--work-dir")
    assert "--evaluate-test-split" not in command


@pytest.mark.parametrize(("overrides", "words"), [
    ({"use_chief": True}, "use_chief"),
    ({"strategy": "parameter_server", "num_ps": 1, "num_workers": 2}, "parameter_server"),
    ({"name": "fmnist-tune-" + "x" * 28}, "too long for a TrainJob"),
])
def test_what_a_trainjob_trial_cannot_do_is_refused_before_anything(overrides, words):
    """trainjob_problems' refusals reach the Experiment too; a trial's TrainJob is named
    <experiment>-<8 characters> (Katib v0.19.0 suggestionclient.go line 177), which the
    pod-name check counts."""
    with pytest.raises(UserInputError, match=words):
        _trainjob_manifest(_settings(**overrides))
    _manifest(_settings(**overrides))  # the same settings make TFJob trials


def test_an_unknown_trial_operator_is_refused():
    with pytest.raises(UserInputError, match="tfjob, trainjob"):
        build_experiment(_settings(), SearchSpace.default("tpe", "dropout"), DATA_DIR, "jax")


@pytest.mark.parametrize(("operator", "shape"), [("tfjob", OVERRIDES), ("trainjob", OVERRIDES),
                                                 ("trainjob", PATCHES)])
def test_following_the_settings_through_the_build_meets_each_check_once(monkeypatch, operator,
                                                                         shape):
    """Issue 43: TrainingJobSpec.validate was reached three times on this path and the TrainJob
    rules by three functions. Now the Experiment's rules run in check_experiment, the trials'
    job checks itself as it is made, and the builders only build."""
    from tests.call_counts import count_rules

    settings, space = _settings(num_workers=2), SearchSpace.default("tpe", "dropout")
    counts = count_rules(monkeypatch)
    build_experiment(settings, space, DATA_DIR, operator, shape)
    assert counts == {
        "the training configuration": 1, "the job's replicas": 1, "the pods' settings": 1,
        "the Experiment's storage and pods": 1, "the Experiment's search": 1,
        "Katib's webhook": 1,
        ("what a TFJob cannot do" if operator == "tfjob" else "what a TrainJob cannot do"): 1}


def test_the_katib_launcher_checks_the_experiment_once_and_before_asking_the_cluster(
        monkeypatch):
    """The launcher checks the Experiment before any call, asks which operator runs the
    trials, and builds it for that operator once (it built it twice for TrainJob trials)."""
    from fmnist_kfp.katib.experiment_launcher import KatibExperimentLauncher
    from tests.call_counts import count_rules

    asked = []

    class Katib:
        def training_operator(self, setting, timeout):
            asked.append(setting)
            return "trainjob", PATCHES

    launcher = KatibExperimentLauncher(Katib(), out=io.StringIO())
    counts = count_rules(monkeypatch)
    with pytest.raises(UserInputError, match="max_trial_count"):
        launcher.experiment(_settings(max_trial_count=0), SearchSpace.default("tpe", "dropout"),
                            DATA_DIR)
    assert asked == []  # refused before the cluster was asked
    counts.clear()
    experiment = launcher.experiment(_settings(), SearchSpace.default("tpe", "dropout"),
                                     DATA_DIR)
    assert asked == ["auto"] and (launcher.operator, launcher.shape) == ("trainjob", PATCHES)
    assert experiment.spec.trial_template.trial_spec["kind"] == "TrainJob"
    assert set(counts.values()) == {1} and "what a TFJob cannot do" not in counts


class _Created(Exception):
    """The tuning step got as far as running its Experiment."""


@pytest.mark.parametrize("kubernetes", [{}, {"cpu": "lots"}])
def test_the_tuning_step_checks_each_rule_once_before_the_dataset_is_staged(
        kubernetes, monkeypatch, tmp_path, synthetic_dataset):
    """Issue 43: on the tuning step's path the pods' settings were checked twice, as the step
    made them and with the Experiment; now the step merges them (its own rules: claim,
    namespace, images) and the Experiment's check checks them, once, before anything is
    staged."""
    from fmnist_kfp.katib.experiment_launcher import KatibExperimentLauncher
    from fmnist_kfp.kfp_components.tune.step import tune_step
    from fmnist_kfp.settings.training import TrainingConfig
    from tests.call_counts import count_rules

    class Katib:
        def training_operator(self, setting, timeout):
            return "tfjob", OVERRIDES

    class Launcher(KatibExperimentLauncher):
        def run(self, settings, search_space, data_dir, experiment=None):
            raise _Created()

    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    volume = tmp_path / "volume"
    counts = count_rules(monkeypatch)
    with pytest.raises(UserInputError if kubernetes else _Created, match="cpu" if kubernetes
                       else None):
        tune_step(model_type="dropout", base=TrainingConfig(), data_dir=str(synthetic_dataset),
                  tuning={"algorithm": "random", "max_trials": 2, "parallel_trials": 1,
                          "early_stopping": False},
                  output_dir=str(tmp_path / "search"), backend="kubernetes",
                  kubernetes={"namespace": "team-a", "pvc_name": "fmnist-pvc",
                              "mount_path": str(volume), **kubernetes},
                  image=IMAGE, launcher=Launcher(Katib(), out=io.StringIO()))
    if kubernetes:
        assert counts["the pods' settings"] == 1 and not volume.exists()
        return
    assert counts == {
        "the training configuration": 1, "the job's replicas": 1, "the pods' settings": 1,
        "the Experiment's storage and pods": 1, "the Experiment's search": 1,
        "Katib's webhook": 1, "what a TFJob cannot do": 1}
    assert (volume / "datasets").exists()  # staged once everything was checked
