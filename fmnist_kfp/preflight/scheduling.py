"""What the run's ``kubernetes.scheduling`` needs on the cluster (:func:`check_scheduling`):
for ``queue`` Kueue, the LocalQueue, and that Kueue manages the run's training jobs (the
server-side dry run of the run's TFJob or TrainJob, as the train step builds it with the
queue's label, comes back suspended:
:func:`fmnist_kfp.preflight.training_operator.check_training`); for ``priority_class`` the
PriorityClass (and, with a queue, Kueue's WorkloadPriorityClass); for ``gang`` the scheduler's
PodGroup API, Volcano's queue, and the training operator's ``--gang-scheduler-name``. Each is
silently ignored, or leaves the job waiting forever, when missing (docs/scheduling.md)."""

from __future__ import annotations

import json
import re

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.api_errors import refusal_message, status_line
from fmnist_kfp.kubernetes.workload import GROUP as WORKLOAD_GROUP
from fmnist_kfp.preflight.common import (
    SETUP,
    Cluster,
    Row,
    _condition,
    _read,
    _serves,
)
from fmnist_kfp.settings.scheduling import KUEUE_QUEUE_LABEL, SchedulingSettings

SCHEDULING_SETUP = f"{SETUP}scheduling"
# Kueue (kubernetes-sigs/kueue v0.19.2): v1beta2 stored since v0.16, v1beta1 still served
# (deprecated) and the only one before v0.15 (tests/crds/kueue.x-k8s.io_localqueues.yaml).
KUEUE_GROUP = WORKLOAD_GROUP
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
# site/content/en/docs/getting-started/installation.md line 59 (the release's manifests.yaml);
# site/content/en/docs/tasks/run/kubeflow/tfjobs.md line 27 (enable the TFJob integration).
KUEUE_INSTALL = ("install Kueue (kubectl apply --server-side -f https://github.com/"
                 "kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml; Kubeflow "
                 "does not ship it), with kubeflow.org/tfjob in integrations.frameworks")
# The TFJob integration is off by default since v0.19.0: config/components/manager/
# controller_manager_config.yaml line 55 (commented out); the ConfigMap is manager-config with
# namePrefix kueue- in kueue-system (config/components/manager/kustomization.yaml lines 7-10,
# config/default/kustomization.yaml lines 2 and 9), the Deployment kueue-controller-manager.
KUEUE_ENABLE_TFJOB = (
    "enable kubeflow.org/tfjob in integrations.frameworks of ConfigMap kueue-manager-config in "
    "kueue-system (off by default since Kueue v0.19), and restart kueue-controller-manager "
    "(kubectl rollout restart deployment/kueue-controller-manager -n kueue-system)")
# The TrainJob integration is on by default (the same file, line 62): off only where an admin
# took it out. Kueue writes the TrainJob's spec.runtimePatches, which Trainer serves from 2.2.
KUEUE_ENABLE_TRAINJOB = (
    "ask the cluster admin to keep trainer.kubeflow.org/trainjob in integrations.frameworks of "
    "ConfigMap kueue-manager-config in kueue-system (on by default), and restart "
    "kueue-controller-manager (kubectl rollout restart deployment/kueue-controller-manager -n "
    "kueue-system)")
# Where Kueue's mutating webhook holds each kind: spec.runPolicy.suspend for a TFJob
# (pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go lines 50-56),
# spec.suspend for a TrainJob (pkg/controller/jobs/trainjob/trainjob_controller.go 116-136); the
# integration's name, and how to turn it on.
KUEUE_HOLDS = {
    "TFJob": (("runPolicy", "suspend"), "kubeflow.org/tfjob", KUEUE_ENABLE_TFJOB),
    "TrainJob": (("suspend",), "trainer.kubeflow.org/trainjob", KUEUE_ENABLE_TRAINJOB),
}
# Gang schedulers: the PodGroup API the training operator creates, and the install (kubeflow/
# trainer v1.9.2 cmd/training-operator.v1/main.go lines 191-202 and 260-269: it exits at start
# when the CRD of its --gang-scheduler-name is missing; its CI installs either scheduler as
# below: scripts/gha/setup-training-operator.sh lines 37-39 and 54).
GANG_APIS = {
    "volcano": ("scheduling.volcano.sh", "v1beta1", "Volcano",
                "install Volcano (kubectl apply -f https://raw.githubusercontent.com/volcano-sh/"
                "volcano/v1.15.1/installer/volcano-development.yaml)"),
    "scheduler-plugins": ("scheduling.x-k8s.io", "v1alpha1", "scheduler-plugins",
                          "install scheduler-plugins as a second scheduler (its Helm chart "
                          "manifests/install/charts/as-a-second-scheduler of kubernetes-sigs/"
                          "scheduler-plugins v0.34.7, in namespace scheduler-plugins)"),
}
VOLCANO_DEFAULT_QUEUE = "default"  # volcano v1.15.1 scheduling/v1beta1/types.go lines 340-343
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # .../v1beta1/labels.go 46-48
# The training operator as kubeflow/manifests installs it: Deployment training-operator
# (kubeflow/trainer v1.9.2 manifests/base/deployment.yaml line 4) in kubeflow, where its CI
# patches the flag in (scripts/gha/setup-training-operator.sh lines 43-44 and 50-51); run as
# `/manager` with no flags (deployment.yaml lines 20-21), i.e. without gang scheduling.
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_DEPLOYMENT = "training-operator"
_GANG_FLAG = re.compile(r"^--?gang-scheduler-name(?:=(.*))?$")


def _gang_flag_fix(gang: str) -> str:
    """How to run the training operator with ``--gang-scheduler-name`` for ``gang``."""
    value = "volcano" if gang == "volcano" else "scheduler-plugins"
    return (f"run the training operator with --gang-scheduler-name={value} (as its CI does: "
            f"kubectl patch -n {OPERATOR_NAMESPACE} deployment {OPERATOR_DEPLOYMENT} "
            "--type=json -p='[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/"
            f"command/1\", \"value\": \"--gang-scheduler-name={value}\"}}]')")


def check_kueue(api_client, cluster: Cluster, job=None) -> tuple[list[Row], str]:
    """The ``queue`` key: Kueue's API, the LocalQueue in the run's namespace, and whether Kueue
    manages the run's training jobs; returns the rows and the Kueue API version served ("" when
    none). ``job``: the dry run of the run's TFJob or TrainJob (a
    :class:`fmnist_kfp.preflight.training_operator.DryRun`; None where none was tried).

    Whether Kueue manages them is asked of Kueue itself: the run's job, labelled with the queue
    by the train step's builder, is sent as a server-side dry run (``dryRun=All``: admission
    runs, mutating webhooks included, nothing is stored) and must come back suspended, which
    Kueue's mutating webhook makes every job of a queue (kubernetes-sigs/kueue v0.19.2
    pkg/controller/jobframework/base_webhook.go lines 69-82, defaults.go lines 36-46; where
    each kind holds it: :data:`KUEUE_HOLDS`; the webhooks declare ``sideEffects=None``, so they
    run on dry runs: tfjob_controller.go line 50). With the kind's integration off — for
    ``kubeflow.org/tfjob`` the default since v0.19 — the webhook is a no-op
    (jobframework/setup.go lines 108-111) and the job runs at once, its queue ignored. Run
    against the real Kueue v0.19.2 by tests/fmnist_kfp/launcher/test_queued_on_the_cluster.py."""
    queue, namespace = cluster.scheduling.queue, cluster.namespace
    version, unknown = "", False
    for candidate in KUEUE_VERSIONS:
        served = _serves(api_client, KUEUE_GROUP, candidate, "localqueues")
        if served:
            version = candidate
            break
        unknown = unknown or served is None
    if not version:
        if unknown:
            return [Row("Kueue", None, "cannot ask the API server whether Kueue is served")], ""
        return [Row("Kueue", False, f"localqueues.{KUEUE_GROUP} is not served "
                                    f"({'/'.join(KUEUE_VERSIONS)}): Kueue is not installed, so "
                                    f"queue {queue!r} cannot hold the run's jobs",
                    KUEUE_INSTALL)], ""
    rows = [Row("Kueue", True, f"localqueues.{KUEUE_GROUP}, served at {version}")]

    what = f"Kueue LocalQueue {namespace}/{queue}"
    local_queue, problem = _read(api_client, f"/apis/{KUEUE_GROUP}/{version}/namespaces/"
                                             f"{namespace}/localqueues/{queue}")
    if problem == "missing":
        rows.append(Row(what, False, f"missing: the run's jobs would wait suspended, their "
                                     f"Workloads saying \"LocalQueue {queue} doesn't exist\"",
                        f"ask the cluster admin for a LocalQueue {queue} in {namespace}, or "
                        f"apply the example (ClusterQueue, flavor, LocalQueue fmnist, priority "
                        f"classes; cluster-admin): kubectl apply -k {SCHEDULING_SETUP} -n "
                        f"{namespace}, then use queue fmnist"))
    elif problem is not None:
        rows.append(Row(what, None, f"cannot read it ({status_line(problem)})"))
    else:
        cluster_queue = (local_queue.get("spec") or {}).get("clusterQueue", "")
        # Its Active condition (kueue v0.19.2 apis/kueue/v1beta2/localqueue_types.go lines
        # 154-156), False with reason Stopped, ClusterQueueDoesNotExist or
        # ClusterQueueIsInactive (pkg/controller/core/localqueue_controller.go lines 193-213).
        active = _condition(local_queue, "Active")
        if active is not None and active.get("status") == "False":
            rows.append(Row(what, False, f"inactive ({active.get('reason')}: "
                                         f"{active.get('message')}; ClusterQueue "
                                         f"{cluster_queue}): Kueue admits nothing from it",
                            f"ask the cluster admin to create or reactivate ClusterQueue "
                            f"{cluster_queue} (kubectl describe localqueue {queue} -n "
                            f"{namespace})"))
        elif active is None:
            rows.append(Row(what, None, f"ClusterQueue {cluster_queue}; no status yet (is "
                                        "kueue-controller-manager running in kueue-system?)"))
        else:
            rows.append(Row(what, True, f"ClusterQueue {cluster_queue}, active"))

    if job is not None:
        rows.append(_check_kueue_manages(cluster, job))
    return rows, version


def _check_kueue_manages(cluster: Cluster, job) -> Row:
    """Whether Kueue suspended the run's TFJob or TrainJob, labelled with the queue: its
    server-side dry run (:func:`check_kueue`)."""
    queue, namespace, kind = cluster.scheduling.queue, cluster.namespace, job.kind
    (path, integration, enable) = KUEUE_HOLDS[kind]
    what = f"Kueue manages {kind}s"
    label = f"{KUEUE_QUEUE_LABEL}={queue}"
    if job.unbuilt:
        return Row(what, None, f"could not check: the run's {kind} was not built here ("
                               f"{job.unbuilt})")
    if job.error is not None:
        return Row(what, None, f"could not check: the server-side dry run of the run's {kind} "
                               f"(labelled {label}) in {namespace} was refused "
                               f"({refusal_message(job.error)})",
                   f"if Kueue's webhook failed, {kind}s cannot be created at all: check "
                   "kueue-controller-manager in kueue-system; else ask the cluster admin "
                   f"whether Kueue's integrations.frameworks lists {integration}")
    holder = job.answer.get("spec") or {}
    for key in path[:-1]:
        holder = holder.get(key) or {}
    if holder.get(path[-1]) is True:
        return Row(what, True, f"the run's {kind}, labelled {label}, is created suspended "
                               "(server-side dry run): Kueue holds it until admitted")
    return Row(what, False, f"the run's {kind}, labelled {label}, is not suspended on create "
                            f"(server-side dry run): Kueue does not manage {kind}s, so the "
                            f"run's {kind}s would start at once, their queue ignored", enable)


def check_priority(api_client, cluster: Cluster, kueue_version: str) -> list[Row]:
    """The ``priority_class`` key: the PriorityClass its pods name (the API server refuses a
    pod naming a missing one: kubernetes plugin/pkg/admission/priority/admission.go, "no
    PriorityClass with name ... was found"), and with a queue Kueue's WorkloadPriorityClass of
    the same name (a missing one leaves the job suspended without a Workload or an event:
    kueue v0.19.2 pkg/controller/jobframework/reconciler.go lines 1698-1705 and 507-521)."""
    name = cluster.scheduling.priority_class
    fix = (f"ask the cluster admin for it, or apply the example classes fmnist-high and "
           f"fmnist-low (cluster-admin): kubectl apply -k {SCHEDULING_SETUP} -n "
           f"{cluster.namespace}")
    rows = []
    what = f"PriorityClass {name}"
    found, problem = _read(api_client, f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
    if problem == "missing":
        rows.append(Row(what, False, "missing: the API server refuses the run's pods (no "
                                     f"PriorityClass with name {name} was found)", fix))
    elif problem is not None:
        rows.append(Row(what, None, f"cannot read it ({status_line(problem)})"))
    else:
        rows.append(Row(what, True, f"value {found.get('value')}, preemptionPolicy "
                                    f"{found.get('preemptionPolicy') or 'PreemptLowerPriority'}"))
    if cluster.scheduling.queue and kueue_version:
        what = f"Kueue WorkloadPriorityClass {name}"
        found, problem = _read(api_client, f"/apis/{KUEUE_GROUP}/{kueue_version}/"
                                           f"workloadpriorityclasses/{name}")
        if problem == "missing":
            rows.append(Row(what, False, "missing: Kueue makes no Workload for a job naming "
                                         "it, so the job stays suspended with no event", fix))
        elif problem is not None:
            rows.append(Row(what, None, f"cannot read it ({status_line(problem)})"))
        else:
            rows.append(Row(what, True, f"value {found.get('value')}"))
    return rows


def _operator_flag(deployment: dict) -> str | None:
    """The training operator's ``--gang-scheduler-name`` (Go's flag package takes ``-`` or
    ``--``, ``=value`` or the next argument); None when it is not given."""
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec")
                  or {}).get("containers") or []
    for container in containers:
        words = list(container.get("command") or []) + list(container.get("args") or [])
        for index, word in enumerate(words):
            match = _GANG_FLAG.match(str(word))
            if match:
                if match[1] is not None:
                    return match[1]
                return str(words[index + 1]) if index + 1 < len(words) else ""
    return None


def check_gang(api_client, cluster: Cluster) -> list[Row]:
    """The ``gang`` key: the gang scheduler's PodGroup API, Volcano's queue (open), and the
    training operator's ``--gang-scheduler-name``, without which ``runPolicy.schedulingPolicy``
    is silently ignored (kubeflow/trainer v1.9.2 pkg/controller.v1/common/job.go line 250,
    pod.go line 440; cmd/training-operator.v1/main.go lines 96-97 and 191-202: ``volcano`` in
    any case is Volcano, any other name scheduler-plugins; ``None`` turns it off:
    pkg/controller.v1/common/job_controller.go line 77)."""
    gang = cluster.scheduling.gang
    group, version, scheduler, install = GANG_APIS[gang]
    rows = []
    served = _serves(api_client, group, version, "podgroups")
    what = f"{scheduler} PodGroup"
    if served is None:
        rows.append(Row(what, None, "cannot ask the API server"))
    elif not served:
        rows.append(Row(what, False, f"podgroups.{group}/{version} is not served: "
                                     f"{scheduler} is not installed (and a training operator "
                                     "started with its --gang-scheduler-name exits)", install))
    else:
        rows.append(Row(what, True, f"podgroups.{group}, served at {version}"))
    if gang == "volcano" and served:
        rows.append(_check_volcano_queue(api_client, cluster))
    rows.append(_check_operator_flag(api_client, gang))
    return rows


def _check_volcano_queue(api_client, cluster: Cluster) -> Row:
    """The Volcano queue of the run's PodGroups: ``gang_queue``, else ``default`` — which
    Volcano's PodGroup webhook replaces with the namespace's ``scheduling.volcano.sh/
    queue-name`` annotation (volcano v1.15.1 pkg/webhooks/admission/podgroups/mutate/
    mutate_podgroup.go lines 104-122). Volcano's admission refuses a PodGroup of a missing or
    not ``Open`` queue (validate/validate_podgroup.go lines 101-118); the operator then only
    logs it and the TFJob stays Created with no pods (kubeflow/trainer v1.9.2
    pkg/controller.v1/common/job.go lines 315-334)."""
    name, source = cluster.scheduling.gang_queue, "gang_queue"
    if not name:
        name, source = VOLCANO_DEFAULT_QUEUE, "Volcano's default"
        namespace, _ = _read(api_client, f"/api/v1/namespaces/{cluster.namespace}")
        annotated = (((namespace or {}).get("metadata") or {}).get("annotations")
                     or {}).get(VOLCANO_QUEUE_ANNOTATION)
        if annotated:
            name = annotated
            source = f"namespace {cluster.namespace}'s {VOLCANO_QUEUE_ANNOTATION}"
    what = f"Volcano queue {name}"
    queue, problem = _read(api_client, f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}")
    if problem == "missing":
        fix = (f"set gang_queue to an Open Volcano queue, or ask the cluster admin to create "
               f"the Queue {name}")
        if name == VOLCANO_DEFAULT_QUEUE:
            fix = ("Volcano's scheduler creates the queue default when it starts (volcano "
                   "v1.15.1 pkg/scheduler/cache/cache.go lines 464-519): is volcano-scheduler "
                   "running in volcano-system? Or set gang_queue to an Open queue")
        return Row(what, False, f"missing ({source}): Volcano refuses the run's PodGroups "
                                "(\"unable to find queue\") and the TFJobs wait with no pods", fix)
    if problem is not None:
        return Row(what, None, f"cannot read it ({status_line(problem)})")
    state = (queue.get("status") or {}).get("state")
    if state == "Open":
        return Row(what, True, f"Open ({source})")
    if not state:
        return Row(what, None, f"no state yet ({source}): is volcano-controllers running?")
    return Row(what, False, f"{state} ({source}): Volcano refuses PodGroups of a queue that is "
                            "not Open, and the TFJobs wait with no pods",
               f"ask the cluster admin to open it (vcctl queue operate --name {name} --action "
               "open), or set gang_queue to an Open queue")


def _check_operator_flag(api_client, gang: str) -> Row:
    """The training operator's ``--gang-scheduler-name`` against the ``gang`` asked for."""
    what = "training operator gang scheduling"
    path = f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/deployments/{OPERATOR_DEPLOYMENT}"
    deployment, problem = _read(api_client, path)
    if problem is not None:
        why = ("not found" if problem == "missing" else status_line(problem))
        return Row(what, None, f"could not check: cannot read deployment "
                               f"{OPERATOR_NAMESPACE}/{OPERATOR_DEPLOYMENT} ({why}); the "
                               "operator ignores runPolicy.schedulingPolicy unless it runs "
                               "with --gang-scheduler-name", _gang_flag_fix(gang))
    flag = _operator_flag(deployment)
    if not flag or flag == "None":
        return Row(what, False, f"{OPERATOR_DEPLOYMENT} runs without --gang-scheduler-name: it "
                                "ignores runPolicy.schedulingPolicy silently (no PodGroup, the "
                                "default scheduler, no event)", _gang_flag_fix(gang))
    runs = "volcano" if flag.lower() == "volcano" else "scheduler-plugins"
    if runs != gang:
        return Row(what, False, f"{OPERATOR_DEPLOYMENT} runs with --gang-scheduler-name={flag} "
                                f"({runs}'s PodGroups), not {gang}",
                   f"set gang to {runs}, or {_gang_flag_fix(gang)}")
    return Row(what, True, f"{OPERATOR_DEPLOYMENT} runs with --gang-scheduler-name={flag}")


def check_scheduling(api_client, cluster: Cluster, job=None,
                     operator: str = "tfjob") -> list[Row]:
    """What the run's ``kubernetes.scheduling`` needs on the cluster (nothing when it sets none
    of queue, priority_class, gang). ``job``: the dry run of the run's training job (None
    where none was tried: its API is not served, or its runtime is missing). With TrainJobs
    (``operator`` ``trainjob``) ``gang`` is refused by the train step before any work (a
    TrainJob's pods are gang-scheduled by its runtime's podGroupPolicy, which it cannot set:
    ``fmnist_kfp.kubernetes.trainjob.trainjob_problems``), so it is a miss here too."""
    scheduling = cluster.scheduling
    rows: list[Row] = []
    kueue_version = ""
    if scheduling.queue:
        kueue_rows, kueue_version = check_kueue(api_client, cluster, job)
        rows += kueue_rows
    if scheduling.priority_class:
        rows += check_priority(api_client, cluster, kueue_version)
    if scheduling.gang and operator == "trainjob":
        rows.append(Row("gang scheduling with TrainJobs", False,
                        f"gang {scheduling.gang}: a TrainJob cannot ask for it (its runtime's "
                        "podGroupPolicy decides), so the train step refuses the run",
                        "drop gang from kubernetes.scheduling, or run TFJobs "
                        "(kubernetes.operator tfjob, with the Training Operator v1)"))
    elif scheduling.gang:
        rows += check_gang(api_client, cluster)
    return rows


def scheduling_from(text: str) -> SchedulingSettings:
    """``--scheduling``: the run's ``kubernetes.scheduling`` as JSON, checked as a run checks
    it."""
    if not text:
        return SchedulingSettings()
    try:
        values = json.loads(text)
    except ValueError as error:
        raise UserInputError(f"--scheduling is not JSON ({error}); give an object, e.g. "
                             "'{\"queue\": \"team-a\", \"gang\": \"volcano\"}'") from None
    if not isinstance(values, dict):
        raise UserInputError("--scheduling must be a JSON object, e.g. '{\"queue\": "
                             "\"team-a\"}'")
    return SchedulingSettings.from_dict(values).validate()
