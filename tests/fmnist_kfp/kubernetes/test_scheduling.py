"""The ``kubernetes.scheduling`` setting on every object a run creates (issue 23): TFJobs,
Katib Experiments (their trials' TFJobs) and batch Jobs with each option pass strict
validation against the upstream CRDs (../shared/crds), and what Kueue and the training
operator make of them passes Kueue's, Volcano's and scheduler-plugins' CRDs (tests/crds, with
their sources in tests/crds/SOURCE.md): the Workload of each job (its pod templates as
PodSets) and the PodGroup of a gang."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.experiment import build_experiment
from fmnist_kfp.kubernetes.job import build_indexed_job
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec
from fmnist_kfp.settings.jobs import KubernetesSettings, cluster_settings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from fmnist_kfp.tuning.experiment_settings import ExperimentSettings
from fmnist_kfp.tuning.search_space import SearchSpace
from tests.crd_schemas import validate_strict

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
GPU_IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0-gpu"
OPTIONS = {
    "queue": {"queue": "team-a"},
    "queue and priority": {"queue": "team-a", "priority_class": "fmnist-high",
                           "start_deadline_minutes": 30},
    "priority": {"priority_class": "fmnist-low"},
    "gang volcano": {"gang": "volcano", "gang_queue": "research",
                     "priority_class": "fmnist-high"},
    "gang scheduler-plugins": {"gang": "scheduler-plugins", "gang_timeout_seconds": 300},
    "everything": {"queue": "team-a", "priority_class": "fmnist-high", "gang": "volcano"},
}


def _settings(scheduling: dict) -> KubernetesSettings:
    """The pods' settings as a step makes them: checked there, once."""
    return cluster_settings({"namespace": "team-a", "pvc_name": "fmnist-pvc",
                             "scheduling": scheduling}, image=IMAGE, gpu_image=GPU_IMAGE)


def _tfjob(scheduling: dict, **spec) -> dict:
    values = dict(name="fmnist-basic-run-1", config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir="/mnt/fmnist/models/b/1",
                  work_dir="/mnt/fmnist/models/b", num_workers=2)
    values.update(spec)
    return ClusterJob(TrainingJobSpec(**values), _settings(scheduling), "tfjob").manifest()


def _templates(tfjob: dict) -> list[dict]:
    return [replica["template"] for replica in tfjob["spec"]["tfReplicaSpecs"].values()]


def kueue_workload(job: dict, pod_sets: list[tuple[str, int, dict]],
                   version: str = "v1beta2") -> dict:
    """The Workload Kueue v0.19.2 creates for a managed job (jobframework/reconciler.go lines
    1606-1635, utils.go 263-282): queue from the label, one PodSet per pod template, the
    WorkloadPriorityClass the label names (v1beta2 ``priorityClassRef``; v1beta1
    ``priorityClassSource``/``priorityClassName``)."""
    labels = job["metadata"]["labels"]
    spec = {"queueName": labels["kueue.x-k8s.io/queue-name"],
            "podSets": [{"name": name, "count": count, "template": copy.deepcopy(template)}
                        for name, count, template in pod_sets]}
    if "kueue.x-k8s.io/priority-class" in labels:
        name = labels["kueue.x-k8s.io/priority-class"]
        spec.update({"priorityClassRef": {"group": "kueue.x-k8s.io",
                                          "kind": "WorkloadPriorityClass", "name": name}}
                    if version == "v1beta2" else
                    {"priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                     "priorityClassName": name})
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Workload",
            "metadata": {"name": "w", "namespace": job["metadata"]["namespace"]},
            "spec": spec}


def operator_pod_group(tfjob: dict, scheduler: str) -> dict:
    """The PodGroup the training operator (kubeflow/trainer v1.9.2) makes of a gang TFJob:
    pkg/controller.v1/common/job.go lines 251-312 (minMember from minAvailable, Volcano's
    queue defaulting to ``default`` and its priorityClassName; scheduler-plugins' timeout),
    named and owned as the job (common/scheduling.go 50-58)."""
    policy = tfjob["spec"]["runPolicy"]["schedulingPolicy"]
    metadata = {"name": tfjob["metadata"]["name"], "namespace": tfjob["metadata"]["namespace"],
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                     "name": tfjob["metadata"]["name"], "uid": "u",
                                     "controller": True, "blockOwnerDeletion": True}]}
    if scheduler == "volcano":
        spec = {"minMember": policy["minAvailable"], "queue": policy.get("queue") or "default",
                "priorityClassName": policy.get("priorityClass", "")}
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": metadata, "spec": spec}
    spec = {"minMember": policy["minAvailable"]}
    if "scheduleTimeoutSeconds" in policy:
        spec["scheduleTimeoutSeconds"] = policy["scheduleTimeoutSeconds"]
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": metadata, "spec": spec}


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("shape", ["mirrored", "parameter_server", "gpu"])
def test_tfjobs_with_each_option_pass_the_tfjob_kueue_and_gang_crds(option, shape):
    scheduling = OPTIONS[option]
    extra = {"mirrored": {}, "gpu": {"gpus_per_worker": 1},
             "parameter_server": {"strategy": "parameter_server", "num_ps": 1}}[shape]
    tfjob = _tfjob(scheduling, **extra)
    validate_strict(tfjob, "tfjob.kubeflow.org_v1.yaml", "v1")
    labels = tfjob["metadata"]["labels"]
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    total = sum(r["replicas"] for r in replicas.values())
    for template in _templates(tfjob):
        assert template["spec"].get("priorityClassName") == scheduling.get("priority_class")
    if scheduling.get("queue"):
        assert labels["kueue.x-k8s.io/queue-name"] == scheduling["queue"]
        assert labels.get("kueue.x-k8s.io/priority-class") == scheduling.get("priority_class")
        for version in ("v1beta1", "v1beta2"):
            workload = kueue_workload(tfjob, [(kind.lower(), r["replicas"], r["template"])
                                              for kind, r in replicas.items()], version)
            validate_strict(workload, "kueue.x-k8s.io_workloads.yaml", version)
    else:
        assert not any(key.startswith("kueue.x-k8s.io/") for key in labels)
    policy = tfjob["spec"]["runPolicy"].get("schedulingPolicy")
    if scheduling.get("gang"):
        assert policy["minAvailable"] == total  # all or nothing
        names = {t["spec"]["schedulerName"] for t in _templates(tfjob)}
        assert names == {{"volcano": "volcano",
                           "scheduler-plugins": "scheduler-plugins-scheduler"}[scheduling["gang"]]}
        group = operator_pod_group(tfjob, scheduling["gang"])
        if scheduling["gang"] == "volcano":
            validate_strict(group, "scheduling.volcano.sh_podgroups.yaml", "v1beta1")
            assert group["spec"]["queue"] == scheduling.get("gang_queue", "default")
            assert policy.get("priorityClass") == scheduling.get("priority_class")
        else:
            validate_strict(group, "scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")
            assert group["spec"]["scheduleTimeoutSeconds"] == 300
    else:
        assert policy is None
        assert all("schedulerName" not in t["spec"] for t in _templates(tfjob))


@pytest.mark.parametrize("option", OPTIONS)
def test_katib_trials_carry_the_scheduling_of_the_run(option):
    scheduling = OPTIONS[option]
    settings = ExperimentSettings(name="fmnist-tune", kubernetes=_settings(scheduling),
                                  model_type="dropout")
    manifest = to_manifest(build_experiment(
        settings, SearchSpace.default(settings.algorithm, "dropout"), "/mnt/fmnist/dataset"))
    validate_strict(manifest, "experiment.kubeflow.org_v1beta1.yaml", "v1beta1")
    trial = manifest["spec"]["trialTemplate"]["trialSpec"]
    validate_strict(trial, "tfjob.kubeflow.org_v1.yaml", "v1")
    # Katib creates each trial's TFJob from this template, its labels kept (kubeflow/katib
    # v0.19.0 pkg/controller.v1beta1/trial/trial_controller.go lines 277-337): Kueue sees
    # the queue on every trial.
    labels = trial["metadata"]["labels"]
    assert labels.get("kueue.x-k8s.io/queue-name") == scheduling.get("queue")
    assert ("schedulingPolicy" in trial["spec"]["runPolicy"]) == bool(scheduling.get("gang"))


@pytest.mark.parametrize("option", ["queue", "queue and priority", "priority"])
def test_batch_jobs_carry_the_queue_and_priority(option):
    scheduling = OPTIONS[option]
    spec = ScoringJobSpec(name="fmnist-batch-x", model_dir="/m", data_dir="/d", output_dir="/o",
                          num_shards=3)
    job = to_manifest(build_indexed_job(spec, _settings(scheduling)))
    template = job["spec"]["template"]
    assert template["spec"].get("priorityClassName") == scheduling.get("priority_class")
    labels = job["metadata"]["labels"]
    assert labels.get("kueue.x-k8s.io/queue-name") == scheduling.get("queue")
    assert "kueue.x-k8s.io/queue-name" not in template["metadata"]["labels"]
    if scheduling.get("queue"):
        # Kueue v0.19.2 pkg/controller/jobs/job/job_controller.go lines 356-375, 451-458: one
        # PodSet `main`, count min(parallelism, completions); the pod template must be one
        # the Workload CRD accepts.
        workload = kueue_workload(job, [("main", 3, template)])
        validate_strict(workload, "kueue.x-k8s.io_workloads.yaml", "v1beta2")


def test_strict_validation_rejects_what_upstream_rejects():
    """The checks above can fail: a PodGroup with no members, a Workload PodSet with an
    unknown field, a TFJob schedulingPolicy with a misspelt key."""
    tfjob = _tfjob(OPTIONS["everything"])
    group = operator_pod_group(tfjob, "scheduler-plugins")
    group["spec"]["minMember"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validate_strict(group, "scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    workload = kueue_workload(tfjob, [("worker", 2, replicas["Worker"]["template"])])
    workload["spec"]["podSets"][0]["replicas"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_strict(workload, "kueue.x-k8s.io_workloads.yaml", "v1beta2")
    tfjob["spec"]["runPolicy"]["schedulingPolicy"]["minMembers"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_strict(tfjob, "tfjob.kubeflow.org_v1.yaml", "v1")


@pytest.mark.parametrize(("scheduling", "message"), [
    ({"queue": "Team A"}, "is not a LocalQueue name"),
    ({"priority_class": "x" * 64}, "is not a PriorityClass name"),
    ({"gang": "kube-batch"}, "choose volcano or scheduler-plugins"),
    ({"gang_queue": "research"}, "gang_queue names a Volcano queue, but gang is not"),
    ({"gang": "volcano", "gang_timeout_seconds": 60}, "gang_timeout_seconds is scheduler"),
    ({"gang_scheduler_name": "x"}, "gang_scheduler_name is for gang scheduling"),
    ({"start_deadline_minutes": -1}, "start_deadline_minutes must be 0 or more"),
    ({"queues": "team-a"}, "unknown scheduling settings ['queues']"),
])
def test_bad_scheduling_fails_before_anything_is_built(scheduling, message):
    with pytest.raises(UserInputError, match="scheduling: ") as failure:
        _tfjob(scheduling)
    assert message in str(failure.value)
