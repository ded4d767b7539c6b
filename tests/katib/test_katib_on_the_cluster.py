"""The tune step's Katib Experiments on Katib v0.19.0 itself (tests/cluster.py; localcluster/
operators.py KATIB_V0_19): katib-controller with its webhooks, katib-db-manager on MariaDB,
Katib's hyperopt suggestion and median-stopping services from its module's Python source, and
its StdOut metrics collector injected into each trial's primary pod, whose PID namespace it
shares. The step runs as KFP runs it: a pod of the compiled image and environment, as the
pipeline-runner ServiceAccount, with the claim mounted; the trials' jobs are TFJobs, run by
the real Training Operator v1.9.2, and train. TrainJob trials (Trainer v2.2.0 with JobSet
v0.11.0) run on the same Katib in the whole pipeline's tune step
(tests/pipelines/test_pipeline_on_the_cluster.py, its ``trainjob`` run): their objectives as
the collector read them and the best trial's values handed to the training job; a second
search of them here would cost over two minutes of CI for the early stopping alone, which
Katib does alike for either kind (it stops the trial, then reads its retained job).
"""

from __future__ import annotations

import time

import pytest

from tests.kfp_components.test_cluster_steps import (  # noqa: F401 (the fixture)
    _run_step_pod,
    collected_objective,
    compiled,
    katib_objects,
    katib_step_namespace,
)

OPERATOR = "tfjob"  # the trials' jobs: TFJobs
# The search's seed: with it median stopping stops the second of the three trials, before the
# last. Katib v0.19.0 deletes an early-stopped trial's job before it reads the trial's
# observation unless the trial template retains it (pkg/controller.v1beta1/trial/
# trial_controller.go L239-256 and reconcileJob L311-318), and requests no new suggestion while
# an early-stopped trial has none (experiment/experiment_controller.go L466-473,
# kubeflow/katib#1377): without ``retain`` this search waited until the step's deadline.
RANDOM_STATE = 2
OBSERVATION_SECONDS = 60  # a reconcile, under CI's load


@pytest.fixture
def tune_namespace(katib_cluster, compiled):  # noqa: F811
    name = katib_step_namespace(katib_cluster, "tune", compiled)
    yield name
    katib_cluster.delete_namespace(name)


def _trials_observed(cluster, namespace: str) -> list[dict]:
    """The Experiment's trials, oldest first, once each early-stopped one has its observation.
    The Experiment succeeds as its last trial is marked EarlyStopped; the trial controller
    reads that trial's observation from its retained job on a later reconcile
    (trial_controller.go v0.19.0 L239-256)."""
    deadline = time.monotonic() + OBSERVATION_SECONDS
    while True:
        trials = sorted(katib_objects(cluster, namespace, "trials"),
                        key=lambda t: t["metadata"]["creationTimestamp"])
        unread = [t["metadata"]["name"] for t in trials
                  if t["status"]["conditions"][-1]["type"] == "EarlyStopped"
                  and "observation" not in t["status"]]
        if not unread:
            return trials
        assert time.monotonic() < deadline, (
            f"early-stopped trials without an observation after {OBSERVATION_SECONDS} s: "
            f"{unread} of {[t['metadata']['name'] for t in trials]}", trials)
        time.sleep(1)


@pytest.mark.slow
def test_the_tune_steps_experiment_runs_to_its_end_on_katib(katib_cluster, tune_namespace,  # noqa: F811
                                                            compiled, synthetic_dataset):  # noqa: F811
    """tune_step(backend="kubernetes") in its step pod creates an Experiment that Katib runs to
    the end: the suggestion service proposes, each trial's job trains on the staged dataset,
    the collector reads each epoch's ``val_accuracy`` from the trial's stdout (timestamped
    lines, so ``latest`` is the last epoch's), median stopping stops a trial that starts below
    the others and the search goes on after it (the stopped trial's job retained, its
    observation read); the values the step returns are the best trial's, typed as the
    trainer's."""
    from kubernetes import client

    namespace = tune_namespace
    volume = katib_cluster.claim_dir(namespace, compiled["exec-tune-hyperparameters"]["env"][
        "FMNIST_PVC_NAME"])
    inputs = compiled["exec-tune-hyperparameters"]["constants"]
    found, log = _run_step_pod(katib_cluster, namespace, compiled, "exec-tune-hyperparameters", f"""
        import json
        from fmnist_kfp.katib.experiment_launcher import KatibExperimentLauncher
        from fmnist_kfp.kfp_components.tune.step import tune_step
        from fmnist_kfp.settings.platform import MOUNT_PATH
        from fmnist_kfp.settings.training import TrainingConfig

        tuning = {{"algorithm": "random", "random_state": {RANDOM_STATE}, "max_trials": 3,
                   "parallel_trials": 1, "epochs": 2, "train_examples": 256,
                   "early_stopping": True, "min_trials_required": 1, "start_step": 1}}
        result = tune_step(
            model_type="basic", base=TrainingConfig(model_type="basic", filters=8),
            tuning=tuning, data_dir={str(synthetic_dataset)!r},
            output_dir=f"{{MOUNT_PATH}}/search-{OPERATOR}", backend="kubernetes",
            kubernetes={{"operator": {OPERATOR!r}, "cpu": "500m", "memory": "1Gi"}},
            image={inputs["image"]!r}, gpu_image={inputs["gpu_image"]!r},
            launcher=KatibExperimentLauncher(poll_seconds=1, timeout_seconds=540))
        print(json.dumps(result.as_dict()))
    """)
    [experiment] = katib_objects(katib_cluster, namespace, "experiments")
    conditions = {c["type"]: c for c in experiment["status"]["conditions"]}
    assert conditions["Succeeded"]["status"] == "True", experiment["status"]
    assert experiment["spec"]["trialTemplate"]["trialSpec"]["kind"] == "TFJob"
    assert "earlyStopping" in experiment["spec"]
    trials = _trials_observed(katib_cluster, namespace)
    assert len(trials) == 3
    finished, stopped = {}, {}
    for trial in trials:
        name, last = trial["metadata"]["name"], trial["status"]["conditions"][-1]
        assert (last["type"], last["status"]) in (("Succeeded", "True"),
                                                  ("EarlyStopped", "True")), (name, last)
        if last["type"] == "EarlyStopped":
            # Read from the retained job: what the collector reported when it stopped the trial.
            [objective] = [m for m in trial["status"]["observation"]["metrics"]
                           if m["name"] == "val_accuracy"]
            stopped[name] = float(objective["latest"])
            continue
        # What the collector parsed from stdout is what the trainer wrote down.
        finished[name] = collected_objective(experiment, trial, volume)
    # A trial stopped before the last: the search went on after it, to its third trial.
    names = [t["metadata"]["name"] for t in trials]
    assert finished and any(names.index(name) < 2 for name in stopped), trials
    # Each stopped trial scored below the best finished one at its first epoch (median stopping
    # at start_step 1, min_trials_required 1).
    assert all(value < max(finished.values()) for value in stopped.values()), (stopped, finished)
    # Katib kept every trial's TFJob (retain, with early stopping); each Trial owns its job.
    tfjobs = {j["metadata"]["name"] for j in client.CustomObjectsApi(
        katib_cluster.api_client).list_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "tfjobs")["items"]}
    assert tfjobs == set(names)
    best = experiment["status"]["currentOptimalTrial"]
    assert found["best_trial"] == best["bestTrialName"] == max(finished, key=finished.get)
    assert {a["name"]: a["value"] for a in best["parameterAssignments"]} == \
        {k: str(v) for k, v in found["best_parameters"].items()}
    assert isinstance(found["best_parameters"]["batch_size"], int)  # typed as the trainer's
    assert "created Katib Experiment" in log
