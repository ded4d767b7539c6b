"""A stand-in for a cluster with Kubeflow Trainer v2 (the TrainJob controller and webhook), JobSet
and Kubernetes' Indexed Jobs, optionally beside the Training Operator v1
(:class:`tests.standins.kubernetes.KubernetesStandIn`, whose TFJob routes, pods and logs it
extends). It is no cluster: it keeps the rules our code depends on, each citing its upstream
file at the tag (kubeflow/trainer v2.1.0 unless said; kubernetes-sigs/jobset v0.10.1, the
JobSet Trainer v2.1.0 installs; kubernetes-sigs/kueue v0.19.2).

* **API discovery**: ``GET /apis/kubeflow.org/v1`` lists ``tfjobs`` only when the Training
  Operator is installed (``tfjob_operator``), ``GET /apis/trainer.kubeflow.org/v1alpha1``
  lists ``trainjobs``, ``trainingruntimes`` and ``clustertrainingruntimes`` only with Trainer
  (``trainer``); a group not served is a bare 404 (kubernetes/apiserver
  ``pkg/endpoints/discovery``). ``/openapi/v3`` publishes the TrainJob schema of the Trainer
  release served (``trainer_version``: its CRD, v2.1.0 from ../shared/crds/trainer-v2, v2.2.0
  from tests/crds/trainer-v2.2.0).
* **Admission** (create): the API server's checks of kubernetes.py's :func:`admission`, then
  the fields the served CRD does not have are pruned, silently (apiextensions-apiserver
  ``pkg/apiserver/schema/pruning``: no strict field validation asked), then Kueue's mutating
  webhook when Kueue is installed (``kueue``): a TrainJob with a queue label is created
  suspended, and on Trainer 2.2 every TrainJob gets Kueue's ``runtimePatches`` entry (kueue
  v0.19.2 pkg/controller/jobs/trainjob/trainjob_webhook.go lines 70-104); then Trainer's
  validating webhook ``validator.trainjob.trainer.kubeflow.org``, answering 403 as
  controller-runtime does for a validator's error: the referenced ClusterTrainingRuntime must
  exist (pkg/runtime/core/clustertrainingruntime.go lines 84-93); overrides must target a job
  of the runtime, only its containers, and set no env on ``node``
  (plugins/jobset/jobset.go lines 86-152; v2.2.0 lines 125-165 for ``runtimePatches``, whose
  ``manager`` must be a domain-prefixed path, line 129).
* **The TrainJob controller** (pkg/controller/trainjob_controller.go lines 96-143): resolves
  the runtime at each reconcile (a runtime deleted since is an error, no status change: the
  error goes to an event only, lines 118-131); builds the JobSet from the runtime's template
  with the overrides strategically merged (pkg/runtime/core/trainingruntime.go lines 123-238;
  v2.2.0 ``mergeRuntimePatches`` lines 203-240), PlainML's node count and env
  (plugins/plainml/plainml.go lines 45-67), the trainer's image, command, args and resources
  on container ``node`` (plugins/jobset/builder.go lines 113-172), parallelism and
  completions = the node count (jobset.go lines 261-265), named as the TrainJob (line 284);
  leaves an existing unsuspended JobSet alone (jobset.go lines 242-254); sets ``Suspended``
  (trainjob_controller.go lines 187-208) and copies the JobSet's ``Completed`` as
  ``Complete`` and ``Failed`` (jobset.go lines 309-338).
* **JobSet** (pkg/controllers/jobset_controller.go): its webhook refuses a pod name over 63
  characters (pkg/webhooks/jobset_webhook.go lines 230-243): Trainer's create fails, the
  TrainJob gets no status; one Job per replicated job named ``<jobset>-<rjob>-<jobIndex>``,
  labelled and annotated with the JobSet's keys and the restart attempt (lines 694-797), pods
  under the subdomain of the JobSet's name (lines 708-712, 835-844); finished: active Jobs
  deleted (lines 161-176); Jobs of an earlier attempt deleted (lines 178-182, 275-315);
  a failed Job runs the failure policy (failure_policy.go lines 45-78, 181-240): the first
  matching rule's action, else ``RestartJobSet``: ``restarts`` + 1 (all Jobs recreated) while
  ``restartsCountTowardsMax < maxRestarts``, else ``Failed`` ``ReachedMaxRestarts``; all Jobs
  succeeded: ``Completed`` (lines 666-672); suspended: the Jobs suspended, resumed: unsuspended
  (lines 391-512).
* **Indexed Jobs** (kubernetes pkg/controller/job): a pod per completion index, hostname
  ``<job>-<index>``, ``JOB_COMPLETION_INDEX`` and the ``batch.kubernetes.io/
  job-completion-index`` annotation and label; a suspended Job's pods are deleted; a failed pod
  whose exit code a ``podFailurePolicy`` rule ``FailJob`` matches fails the Job (reason
  ``PodFailurePolicy``), else failures past ``backoffLimit`` fail it (``BackoffLimitExceeded``),
  else the index gets a new pod; every index succeeded completes it.
* **The kubelet** runs each pod's container with the env the runtime's template resolves for
  it (values, and the downward API ``metadata.labels[...]`` fields) as a loopback process
  (:class:`tests.standins.tfjob_operator.Kubelet`), or a scripted exit; every pod of one start
  of a Job also gets ``FMNIST_LOOPBACK_PORTS`` (fresh loopback ports, one per node) so that
  :func:`fmnist_kfp.training.jobset_cluster.tf_config_from_jobset` addresses this machine.

Controllers act on ticks: each read of a TrainJob ticks its controllers once, after the
answer, so status always lags the writes that caused it.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from tests import ROOT
from tests.standins.kubernetes import KubernetesStandIn, admission, selects, status_body
from tests.standins.loopback import reply_json
from tests.standins.tfjob_operator import Pod, _free_port

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
TRAINJOB_WEBHOOK = "validator.trainjob.trainer.kubeflow.org"  # manifests/base/webhook
RUNTIME_FILE = ROOT / "manifests" / "trainer-runtime" / "cluster-training-runtime.yaml"
CRDS = {"v2.1.0": "trainer-v2/trainjob.trainer.kubeflow.org_v1alpha1.yaml",
        "v2.2.0": "trainer-v2.2.0/trainjob.trainer.kubeflow.org_v1alpha1.yaml"}
_TRAINJOBS = re.compile(
    r"^/apis/trainer\.kubeflow\.org/([^/]+)/namespaces/([^/]+)/trainjobs(?:/([^/?]+))?")
_RUNTIMES = re.compile(r"^/apis/trainer\.kubeflow\.org/([^/]+)/clustertrainingruntimes/([^/?]+)")
_WORKLOADS = re.compile(r"^/apis/kueue\.x-k8s\.io/[^/]+/namespaces/([^/]+)/workloads")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"  # pkg/constants/constants.go
NODE = "node"
# jobset v0.10.1 api/jobset/v1alpha2/jobset_types.go lines 23-35; pkg/constants constants.go 29.
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Strategic merge keys of the pod template's lists (k8s.io/api core/v1 types.go
# patchMergeKey tags); any other list is replaced.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name",
              "volumeMounts": "mountPath", "env": "name", "ports": "containerPort",
              "imagePullSecrets": "name"}
_DOMAIN_PREFIXED = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/.+")


def strategic_merge(base, patch, key: str = ""):
    """A strategic merge patch of JSON values: maps merge, lists with a merge key merge by it
    (:data:`MERGE_KEYS`), anything else is replaced (k8s.io/apimachinery
    pkg/util/strategicpatch)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for k, v in patch.items():
            merged[k] = strategic_merge(base.get(k), v, k) if k in base else copy.deepcopy(v)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        merged = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, m in enumerate(merged) if m.get(merge_key) == item.get(merge_key)),
                      None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)


def upsert_env(env: list[dict], updates: list[dict]) -> list[dict]:
    """pkg/util/apply ``UpsertEnvVars``: a variable of the same name is replaced, else added."""
    env = [dict(e) for e in env]
    for update in updates:
        at = next((i for i, e in enumerate(env) if e["name"] == update["name"]), None)
        if at is None:
            env.append(dict(update))
        else:
            env[at] = dict(update)
    return env


@functools.cache
def _served_schema(trainer_version: str) -> dict:
    """The TrainJob schema the Trainer release's CRD publishes (read once: the files are
    large)."""
    from tests.crd_schemas import _crd_file

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document = yaml.load(_crd_file(CRDS[trainer_version]).read_text(), Loader=loader)
    [entry] = [v for v in document["spec"]["versions"] if v["name"] == VERSION]
    return entry["schema"]["openAPIV3Schema"]


def load_runtime(path: Path = RUNTIME_FILE) -> dict:
    return yaml.safe_load(path.read_text())


def _condition(conditions: list[dict], type_: str, status: str, reason: str, message: str,
               now: str) -> list[dict]:
    """apimachinery ``meta.SetStatusCondition``: one condition per type, updated in place, the
    transition time changed only when the status changes."""
    for c in conditions:
        if c["type"] == type_:
            if c["status"] != status:
                c["lastTransitionTime"] = now
            c.update(status=status, reason=reason, message=message)
            return conditions
    conditions.append({"type": type_, "status": status, "reason": reason, "message": message,
                       "lastTransitionTime": now})
    return conditions


def _true(conditions: list[dict], type_: str) -> dict | None:
    return next((c for c in conditions if c["type"] == type_ and c["status"] == "True"), None)


class NodePod(Pod):
    """A pod of an Indexed Job; its manifest names the container ``node`` and carries the
    hostname and subdomain."""

    hostname: str = ""
    subdomain: str = ""

    def manifest(self) -> dict:
        manifest = super().manifest()
        manifest["spec"]["containers"][0]["name"] = NODE
        manifest["status"]["containerStatuses"][0]["name"] = NODE
        manifest["spec"].update(hostname=self.hostname, subdomain=self.subdomain)
        return manifest


class IndexedJob:
    """One Job of the JobSet (see the module docstring for its rules)."""

    def __init__(self, name: str, template: dict, labels: dict, annotations: dict,
                 controller: TrainJobController):
        self.name = name
        self.spec = template["spec"]
        self.labels = labels
        self.annotations = annotations
        self.controller = controller
        self.suspended = False
        self.failed_pods = 0
        self.condition: tuple[str, str] | None = None  # ("Complete"|"Failed", reason)
        self.failed_at = ""
        self.pods: dict[int, NodePod] = {}  # the current pod of each index
        self.kept: list[NodePod] = []  # failed pods replaced by a new one: kept, not deleted
        self.succeeded: set[int] = set()

    @property
    def completions(self) -> int:
        return int(self.spec.get("completions") or 1)

    @property
    def attempt(self) -> int:
        return int(self.labels[RESTART_ATTEMPT])

    def _env(self, container: dict, labels: dict, index: int, ports: list[int]) -> dict:
        """The container's env as the kubelet resolves it: values, and downward API label
        fields; then JOB_COMPLETION_INDEX (the Job controller's)."""
        env = {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "valueFrom" in item:
                path = item["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
                found = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
                if found is None:
                    raise AssertionError(f"the stand-in resolves no {path!r}")
                env[item["name"]] = labels.get(found[1], "")
        env["JOB_COMPLETION_INDEX"] = str(index)
        if self.controller.run_processes:
            env["FMNIST_LOOPBACK_PORTS"] = ",".join(map(str, ports))
        return env

    def _start_missing(self) -> None:
        missing = [i for i in range(self.completions)
                   if i not in self.pods and i not in self.succeeded]
        if not missing:
            return
        template = self.spec["template"]
        pod_spec = template["spec"]
        container = next(c for c in pod_spec["containers"] if c["name"] == NODE)
        # A fresh loopback port per node each time the Job starts pods: "the network".
        ports = [_free_port() for _ in range(self.completions)]
        for index in missing:
            labels = {**(template.get("metadata") or {}).get("labels", {}),
                      "batch.kubernetes.io/job-name": self.name, COMPLETION_INDEX: str(index)}
            annotations = {**(template.get("metadata") or {}).get("annotations", {}),
                           COMPLETION_INDEX: str(index)}
            controller = self.controller
            pod = NodePod(
                name=f"{self.name}-{index}-{uuid.uuid4().hex[:5]}",
                namespace=controller.namespace, labels=labels, rtype=NODE, index=index,
                env=self._env(container, labels, index, ports),
                command=list(container.get("command") or []) + list(container.get("args") or []),
                created=controller.clock(), script=controller.next_script(index),
                restart_policy=pod_spec.get("restartPolicy") or "Never",
                annotations=annotations)
            pod.hostname = f"{self.name}-{index}"
            pod.subdomain = pod_spec.get("subdomain", "")
            self.pods[index] = pod
            controller.pods_created.append(pod)

    def _fail_job_rule(self, code: int) -> bool:
        for rule in (self.spec.get("podFailurePolicy") or {}).get("rules") or []:
            exits = rule.get("onExitCodes")
            if rule.get("action") == "FailJob" and exits and exits.get("containerName",
                                                                     NODE) == NODE:
                inside = code in exits.get("values", [])
                if inside == (exits.get("operator", "In") == "In"):
                    return True
        return False

    def reconcile(self) -> None:
        if self.condition is not None:
            return
        if self.suspended:  # a suspended Job's active pods are deleted
            for index, pod in list(self.pods.items()):
                if pod.phase in ("Pending", "Running"):
                    self.controller.delete_pod(pod)
                    del self.pods[index]
            return
        for index, pod in list(self.pods.items()):
            if pod.phase == "Succeeded":
                self.succeeded.add(index)
            elif pod.phase == "Failed":
                code = pod.exit_code if pod.exit_code is not None else 1
                if self._fail_job_rule(code):
                    return self._fail("PodFailurePolicy",
                                      f"Container node for pod {pod.namespace}/{pod.name} "
                                      f"failed with exit code {code} matching FailJob rule at "
                                      "index 0")
                self.failed_pods += 1
                self.kept.append(self.pods.pop(index))
                if self.failed_pods > int(self.spec.get("backoffLimit", 6)):
                    return self._fail("BackoffLimitExceeded",
                                      "Job has reached the specified backoff limit")
        if len(self.succeeded) == self.completions:
            self.condition = ("Complete", "CompletionsReached")
            return None
        self._start_missing()
        return None

    def _fail(self, reason: str, message: str) -> None:
        self.condition = ("Failed", reason)
        self.failed_at = self.controller.clock()
        for index, pod in list(self.pods.items()):  # the Job's active pods are terminated
            if pod.phase in ("Pending", "Running"):
                self.controller.delete_pod(pod)
                del self.pods[index]

    def all_pods(self) -> list[NodePod]:
        return self.kept + list(self.pods.values())

    def delete(self) -> None:
        """Deleting the Job deletes its pods (owner references)."""
        for pod in self.all_pods():
            self.controller.delete_pod(pod)
        self.pods.clear()
        self.kept.clear()


class TrainJobController:
    """One TrainJob with its JobSet and Jobs, reconciled once per :meth:`tick`. ``scripts``
    maps ``"node-<i>"`` to the exit codes of that node's successive pods, each an ``int`` or
    ``(code, ticks running)``; ``run_processes`` runs the real commands instead."""

    def __init__(self, standin: TrainerStandIn, job: dict):
        self.standin = standin
        self.job = job
        self.kubelet = standin.kubelet
        self.clock = standin.clock
        self.run_processes = standin.run_processes
        self.scripts = {k: list(v) for k, v in standin.scripts.items()}
        self.status: dict = {}
        self.jobset: dict | None = None  # spec and status of the JobSet
        self.jobs: dict[str, IndexedJob] = {}
        self.pods_created: list[NodePod] = []
        self.events: list[str] = []

    @property
    def name(self) -> str:
        return self.job["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.job["metadata"]["namespace"]

    @property
    def pods(self) -> dict[str, NodePod]:
        """Every pod that exists now, by name."""
        return {pod.name: pod for job in self.jobs.values() for pod in job.all_pods()}

    def next_script(self, index: int) -> list:
        script = self.scripts.get(f"{NODE}-{index}", [])
        return [script.pop(0)] if script else []

    def delete_pod(self, pod: NodePod) -> None:
        """The pod is deleted: its process stopped (the caller drops it)."""
        self.kubelet.kill(pod)

    # -- Trainer ----------------------------------------------------------------------------

    def _build_jobset_spec(self, runtime: dict) -> dict:
        """The JobSet spec Trainer applies (see the module docstring)."""
        template = copy.deepcopy(runtime["spec"]["template"]["spec"])
        spec = self.job["spec"]
        for override in spec.get("podTemplateOverrides") or []:
            targets = {t["name"] for t in override.get("targetJobs") or []}
            patch = {k: v for k, v in override.items() if k in ("metadata", "spec")}
            for rjob in template["replicatedJobs"]:
                if rjob["name"] in targets:
                    rjob["template"]["spec"]["template"] = strategic_merge(
                        rjob["template"]["spec"]["template"], patch)
        for runtime_patch in spec.get("runtimePatches") or []:
            jobset_spec = (((runtime_patch.get("trainingRuntimeSpec") or {}).get("template")
                            or {}).get("spec") or {})
            for rjob_patch in jobset_spec.get("replicatedJobs") or []:
                for rjob in template["replicatedJobs"]:
                    if rjob["name"] == rjob_patch["name"] and rjob_patch.get("template"):
                        rjob["template"] = strategic_merge(rjob["template"],
                                                           rjob_patch["template"])
        trainer = spec.get("trainer") or {}
        ml_policy = runtime["spec"].get("mlPolicy") or {}
        for rjob in template["replicatedJobs"]:
            labels = (rjob["template"].get("metadata") or {}).get("labels") or {}
            if labels.get(ANCESTOR_LABEL) != "trainer":
                continue
            rjob["replicas"] = 1  # builder.go line 123
            count = trainer.get("numNodes", ml_policy.get("numNodes", 1))
            rjob["template"]["spec"]["parallelism"] = count
            rjob["template"]["spec"]["completions"] = count
            for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
                if container["name"] != NODE:
                    continue
                for key in ("image", "command", "args"):
                    if key in trainer:
                        container[key] = list(trainer[key]) if key != "image" else trainer[key]
                if trainer.get("resourcesPerNode"):
                    container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
                container["env"] = upsert_env(container.get("env") or [],
                                              trainer.get("env") or [])
        # JobSet's webhook defaults (jobset_webhook.go lines 120-139).
        network = template.setdefault("network", {})
        network.setdefault("enableDNSHostnames", True)
        for rjob in template["replicatedJobs"]:
            rjob["template"]["spec"].setdefault("completionMode", "Indexed")
        return template

    def _jobset_admitted(self, spec: dict) -> str:
        """jobset_webhook.go lines 221-243: the longest Job and pod names; "" when fine."""
        for rjob in spec["replicatedJobs"]:
            job = f"{self.name}-{rjob['name']}-{rjob.get('replicas', 1) - 1}"
            pod = f"{job}-{rjob['template']['spec'].get('completions', 1) - 1}-abcde"
            if len(job) > 63:
                return ("JobSet name is too long, job names generated for this JobSet will "
                        "exceed 63 characters")
            if len(pod) > 63:
                return ("JobSet name is too long, pod names generated for this JobSet will "
                        "exceed 63 characters")
        return ""

    def _reconcile_trainer(self) -> None:
        spec = self.job["spec"]
        suspend = bool(spec.get("suspend"))
        runtime = self.standin.runtimes.get(spec["runtimeRef"]["name"])
        if runtime is None:
            self.events.append(f"TrainJobResourcesCreationFailed: clustertrainingruntimes."
                               f"{GROUP} \"{spec['runtimeRef']['name']}\" not found")
        elif self.jobset is None or suspend or self.jobset["spec"].get("suspend"):
            built = self._build_jobset_spec(runtime)
            built["suspend"] = suspend
            problem = self._jobset_admitted(built)
            if problem:
                self.events.append(f"TrainJobResourcesCreationFailed: {problem}")
            elif self.jobset is None:
                self.jobset = {"spec": built, "status": {"restarts": 0,
                                                         "restartsCountTowardsMax": 0,
                                                         "conditions": []}}
            else:
                self.jobset["spec"] = built
        conditions = self.status.setdefault("conditions", [])
        # trainjob_controller.go lines 111 and 187-208.
        self.status["conditions"] = [c for c in conditions if c["type"] != "Failed"]
        now = self.clock()
        if suspend:
            _condition(self.status["conditions"], "Suspended", "True", "Suspended",
                       "TrainJob is suspended", now)
        elif _true(self.status["conditions"], "Suspended"):
            _condition(self.status["conditions"], "Suspended", "False", "Resumed",
                       "TrainJob is resumed", now)
        if self.jobset is not None:
            jobset_conditions = self.jobset["status"]["conditions"]
            for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
                found = _true(jobset_conditions, source)
                if found:
                    _condition(self.status["conditions"], target, "True", found["reason"],
                               found["message"], found["lastTransitionTime"])
            self.status["jobsStatus"] = [
                {"name": NODE, "active": sum(j.condition is None and not j.suspended
                                             for j in self.jobs.values()),
                 "ready": 0, "succeeded": sum(j.condition == ("Complete", "CompletionsReached")
                                              for j in self.jobs.values()),
                 "failed": sum(bool(j.condition and j.condition[0] == "Failed")
                               for j in self.jobs.values()),
                 "suspended": sum(j.suspended for j in self.jobs.values())}]

    # -- JobSet -----------------------------------------------------------------------------

    def _reconcile_jobset(self) -> None:
        if self.jobset is None:
            return
        spec, status = self.jobset["spec"], self.jobset["status"]
        conditions = status["conditions"]
        now = self.clock()
        if _true(conditions, "Completed") or _true(conditions, "Failed"):
            for job in self.jobs.values():
                if job.condition is None:  # the active Jobs are deleted
                    job.delete()
            return
        for name, job in list(self.jobs.items()):
            if job.attempt < status["restarts"]:
                job.delete()
                del self.jobs[name]
        failed = [j for j in self.jobs.values() if j.condition and j.condition[0] == "Failed"]
        if failed:
            policy = spec.get("failurePolicy")
            first = min(failed, key=lambda j: j.failed_at)
            if policy is None:
                _condition(conditions, "Failed", "True", "FailedJobs",
                           f"jobset failed due to one or more job failures (first failed job: "
                           f"{first.name})", now)
                return
            action = "RestartJobSet"
            for rule in policy.get("rules") or []:
                matching = [j for j in failed if (not rule.get("onJobFailureReasons")
                                                  or j.condition[1] in rule["onJobFailureReasons"])
                            and (not rule.get("targetReplicatedJobs")
                                 or j.labels[REPLICATED_JOB] in rule["targetReplicatedJobs"])]
                if matching:
                    action, first = rule["action"], min(matching, key=lambda j: j.failed_at)
                    break
            if action == "FailJobSet":
                _condition(conditions, "Failed", "True", "FailJobSetFailurePolicyAction",
                           f"applying FailJobSet failure policy action (first failed job: "
                           f"{first.name})", now)
            elif status["restartsCountTowardsMax"] >= policy.get("maxRestarts", 0):
                _condition(conditions, "Failed", "True", "ReachedMaxRestarts",
                           f"jobset failed due to reaching max number of restarts (first failed "
                           f"job: {first.name})", now)
            else:
                status["restarts"] += 1
                status["restartsCountTowardsMax"] += 1
            return
        if self.jobs and all(j.condition == ("Complete", "CompletionsReached")
                             for j in self.jobs.values()) and len(self.jobs) == len(
                spec["replicatedJobs"]):
            _condition(conditions, "Completed", "True", "AllJobsCompleted",
                       "jobset completed successfully", now)
            return
        for rjob in spec["replicatedJobs"]:
            for index in range(rjob.get("replicas", 1)):
                name = f"{self.name}-{rjob['name']}-{index}"
                if name in self.jobs:
                    continue
                keys = {JOBSET_NAME: self.name, REPLICATED_JOB: rjob["name"],
                        JOB_INDEX: str(index), RESTART_ATTEMPT: str(status["restarts"])}
                template = copy.deepcopy(rjob["template"])
                pod_template = template["spec"]["template"]
                metadata = pod_template.setdefault("metadata", {})
                metadata["labels"] = {**(metadata.get("labels") or {}), **keys}
                metadata["annotations"] = {**(metadata.get("annotations") or {}), **keys}
                if spec["network"].get("enableDNSHostnames"):
                    pod_template["spec"]["subdomain"] = (spec["network"].get("subdomain")
                                                         or self.name)
                self.jobs[name] = IndexedJob(
                    name, template, {**(template.get("metadata") or {}).get("labels", {}),
                                     **keys}, keys, self)
        suspended = bool(spec.get("suspend"))
        for job in self.jobs.values():
            job.suspended = suspended
        if suspended:
            _condition(conditions, "Suspended", "True", "SuspendedJobs", "jobset is suspended",
                       now)
        elif _true(conditions, "Suspended"):
            _condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed", now)

    def tick(self) -> None:
        """The kubelet, then the Job, JobSet and Trainer controllers, once each."""
        for pod in self.pods.values():
            if pod.phase == "Pending":
                self.kubelet.start(pod, self.run_processes)
            else:
                self.kubelet.step(pod)
        for job in list(self.jobs.values()):
            job.reconcile()
        self._reconcile_jobset()
        self._reconcile_trainer()

    def manifest(self) -> dict:
        return {**self.job, "status": json.loads(json.dumps(self.status))}

    def delete(self) -> None:
        """Deleting the TrainJob garbage-collects its JobSet, Jobs and pods (owner references;
        no finalizer)."""
        for job in self.jobs.values():
            job.delete()


class TrainerStandIn(KubernetesStandIn):
    """An API server with Trainer v2 (``trainer``) and, optionally, the Training Operator v1
    (``tfjob_operator``) and Kueue (``kueue``). ``runtimes``: the ClusterTrainingRuntimes by
    name (default: ours, from manifests/trainer-runtime). ``scripts`` (``"node-<i>"``),
    ``run_processes``, ``running_ticks``, ``work_dir`` and ``logs`` apply to every job, as in
    :class:`KubernetesStandIn`. ``admit_after_ticks``: how many reads Kueue holds a queued
    TrainJob suspended; ``runtime_readable`` False answers 403 to reads of runtimes (a
    namespace's ServiceAccount under ``kubeflow-edit``)."""

    def __init__(self, *, trainer: bool = True, tfjob_operator: bool = False,
                 trainer_version: str = "v2.1.0", kueue: bool = False,
                 runtimes: dict | None = None, admit_after_ticks: int = 2,
                 runtime_readable: bool = True, **options):
        super().__init__(**options)
        self.trainer = trainer
        self.tfjob_operator = tfjob_operator
        self.trainer_version = trainer_version
        self.kueue = kueue
        self.admit_after_ticks = admit_after_ticks
        self.runtime_readable = runtime_readable
        if runtimes is None:
            runtime = load_runtime()
            runtimes = {runtime["metadata"]["name"]: runtime}
        self.runtimes = runtimes
        self.trainjobs: dict[tuple[str, str], TrainJobController] = {}
        self.deleted_trainjobs: dict[tuple[str, str], dict] = {}
        self.queued_ticks: dict[tuple[str, str], int] = {}

    # -- discovery --------------------------------------------------------------------------

    def _crd_schema(self) -> dict:
        return _served_schema(self.trainer_version)

    def _discovery(self, handler, path: str) -> bool:
        lists = {}
        if self.tfjob_operator:
            lists["/apis/kubeflow.org/v1"] = ("kubeflow.org/v1", [("tfjobs", "TFJob", True)])
        if self.trainer:
            lists[f"/apis/{GROUP}/{VERSION}"] = (f"{GROUP}/{VERSION}", [
                ("trainjobs", "TrainJob", True), ("trainingruntimes", "TrainingRuntime", True),
                ("clustertrainingruntimes", "ClusterTrainingRuntime", False)])
        if path in lists:
            group_version, resources = lists[path]
            reply_json(handler, {"kind": "APIResourceList", "apiVersion": "v1",
                                 "groupVersion": group_version, "resources": [
                                     {"name": name, "kind": kind, "namespaced": namespaced,
                                      "singularName": "", "verbs": ["get", "list", "create"]}
                                     for name, kind, namespaced in resources]})
            return True
        if path == "/openapi/v3":
            paths = {f"apis/{GROUP}/{VERSION}": {
                "serverRelativeURL": f"/openapi/v3/apis/{GROUP}/{VERSION}?hash=0"}} \
                if self.trainer else {}
            reply_json(handler, {"paths": paths})
            return True
        if path == f"/openapi/v3/apis/{GROUP}/{VERSION}" and self.trainer:
            schema = {**self._crd_schema(), "x-kubernetes-group-version-kind": [
                {"group": GROUP, "version": VERSION, "kind": "TrainJob"}]}
            reply_json(handler, {"openapi": "3.0.0", "components": {"schemas": {
                f"ai.kubeflow.trainer.{VERSION}.TrainJob": schema}}})
            return True
        if path.startswith("/apis/kubeflow.org/") and not self.tfjob_operator:
            reply_json(handler, status_body(404, "NotFound", "404 page not found"), 404)
            return True
        if path.startswith(f"/apis/{GROUP}/") and not self.trainer:
            reply_json(handler, status_body(404, "NotFound", "404 page not found"), 404)
            return True
        return False

    # -- admission --------------------------------------------------------------------------

    def _prune(self, body: dict) -> dict:
        """Drops the spec fields the served CRD does not have (top level of spec: where the
        two Trainer releases differ)."""
        served = set(self._crd_schema()["properties"]["spec"]["properties"])
        body["spec"] = {k: v for k, v in (body.get("spec") or {}).items() if k in served}
        return body

    def _webhook_problems(self, body: dict) -> list[str]:
        spec = body.get("spec") or {}
        ref = spec.get("runtimeRef") or {}
        runtime = self.runtimes.get(ref.get("name", ""))
        if runtime is None:
            return [f"spec.RuntimeRef: Invalid value: {json.dumps(ref)}: "
                    f"clustertrainingruntimes.{GROUP} \"{ref.get('name')}\" not found: "
                    "specified clusterTrainingRuntime must be created before the TrainJob is "
                    "created"]
        containers = {r["name"]: {c["name"] for c in r["template"]["spec"]["template"]["spec"]
                                  ["containers"]}
                      for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
        problems = []
        for override in spec.get("podTemplateOverrides") or []:
            for target in override.get("targetJobs") or []:
                names = containers.get(target["name"])
                if names is None:
                    problems.append("spec.podTemplateOverrides: Invalid value: must not have "
                                    "targetJob that doesn't exist in the runtime job template")
                    continue
                for c in (override.get("spec") or {}).get("containers") or []:
                    if c["name"] not in names:
                        problems.append("spec.podTemplateOverrides: Invalid value: must not "
                                        "have container that doesn't exist in the runtime job "
                                        f"{target['name']}")
                    elif c.get("env") and c["name"] == NODE:
                        problems.append("spec.podTemplateOverrides: Invalid value: must not "
                                        "have envs for the dataset-initializer, "
                                        "model-initializer, node containers")
        for runtime_patch in spec.get("runtimePatches") or []:
            if not _DOMAIN_PREFIXED.fullmatch(runtime_patch.get("manager", "")):
                problems.append(f"spec.runtimePatches.manager: Invalid value: "
                                f"\"{runtime_patch.get('manager')}\": must be a domain-prefixed "
                                "path")
            jobset = ((runtime_patch.get("trainingRuntimeSpec") or {}).get("template")
                      or {}).get("spec") or {}
            for rjob in jobset.get("replicatedJobs") or []:
                if rjob["name"] not in containers:
                    problems.append("spec.runtimePatches: Invalid value: must not have "
                                    "replicated job that doesn't exist in the runtime job "
                                    "template")
        return problems

    def on_post(self, handler, body: dict) -> None:
        match = _TRAINJOBS.match(urlsplit(handler.path).path)
        if not match:
            if not self.tfjob_operator and handler.path.startswith("/apis/kubeflow.org/"):
                return reply_json(handler, status_body(404, "NotFound",
                                                       "404 page not found"), 404)
            return super().on_post(handler, body)
        if not self.trainer or match[3]:
            return reply_json(handler, status_body(404, "NotFound", "404 page not found"), 404)
        if self._fault(handler, "POST", "trainjobs"):
            return None
        version, namespace = match[1], match[2]
        if admission(handler, body, version, group=GROUP, served=VERSION, kind="TrainJob",
                     plural="trainjobs", webhook=TRAINJOB_WEBHOOK, webhook_code=403,
                     problems=lambda b: []):
            return None
        stored = self._prune(copy.deepcopy(body))
        labels = (stored.get("metadata") or {}).get("labels") or {}
        if self.kueue:
            if labels.get("kueue.x-k8s.io/queue-name"):
                stored["spec"]["suspend"] = True
            if self.trainer_version != "v2.1.0":
                stored["spec"].setdefault("runtimePatches", []).append(
                    {"manager": "kueue.x-k8s.io/manager",
                     "trainingRuntimeSpec": {"template": {"spec": {}}}})
        problems = self._webhook_problems(stored)
        if problems:
            joined = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            return reply_json(handler, status_body(
                403, "Forbidden", f'admission webhook "{TRAINJOB_WEBHOOK}" denied the '
                f"request: {joined}"), 403)
        name = stored["metadata"]["name"]
        with self.lock:
            if (namespace, name) in self.trainjobs:
                return reply_json(handler, status_body(
                    409, "AlreadyExists", f'trainjobs.{GROUP} "{name}" already exists'), 409)
            stored["spec"].setdefault("suspend", False)  # the CRD's default
            stored["metadata"].update(namespace=namespace, uid=f"uid-{name}-{uuid.uuid4().hex[:6]}",
                                      creationTimestamp=self.clock())
            self.trainjobs[(namespace, name)] = TrainJobController(self, stored)
        return reply_json(handler, stored, 201)

    def on_get(self, handler) -> None:
        path = urlsplit(handler.path).path
        if self._discovery(handler, path):
            return None
        if match := _RUNTIMES.match(path):
            if not self.runtime_readable:
                return reply_json(handler, status_body(
                    403, "Forbidden", f'clustertrainingruntimes.{GROUP} "{match[2]}" is '
                    "forbidden: cannot get resource at the cluster scope"), 403)
            runtime = self.runtimes.get(match[2])
            if runtime is None:
                return reply_json(handler, status_body(
                    404, "NotFound", f'clustertrainingruntimes.{GROUP} "{match[2]}" not found'),
                    404)
            return reply_json(handler, runtime)
        if match := _WORKLOADS.match(path):
            selector = parse_qs(urlsplit(handler.path).query).get("labelSelector", [""])[0]
            items = [self._workload(c) for (ns, _), c in self.trainjobs.items()
                     if ns == match[1] and c.job["spec"].get("suspend")
                     and selects(selector, {"kueue.x-k8s.io/job-uid": c.job["metadata"]["uid"]})]
            return reply_json(handler, {"apiVersion": "kueue.x-k8s.io/v1beta1",
                                        "kind": "WorkloadList", "items": items})
        if match := _TRAINJOBS.match(path):
            if self._fault(handler, "GET", "trainjobs"):
                return None
            return self.read_then_reconcile(handler, self.trainjobs, (match[2], match[3]),
                                            f'trainjobs.{GROUP} "{match[3]}"', self._kueue)
        return super().on_get(handler)

    def on_delete(self, handler) -> None:
        match = _TRAINJOBS.match(urlsplit(handler.path).path)
        if not match:
            return super().on_delete(handler)
        if self._fault(handler, "DELETE", "trainjobs"):
            return None
        with self.lock:
            controller = self.trainjobs.pop((match[2], match[3]), None)
        if controller is None:
            return reply_json(handler, status_body(
                404, "NotFound", f'trainjobs.{GROUP} "{match[3]}" not found'), 404)
        self.deleted_trainjobs[(match[2], match[3])] = controller.manifest()
        controller.delete()
        return reply_json(handler, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    # -- Kueue ------------------------------------------------------------------------------

    def _workload(self, controller: TrainJobController) -> dict:
        return {"metadata": {"name": f"trainjob-{controller.name}",
                             "labels": {"kueue.x-k8s.io/job-uid":
                                        controller.job["metadata"]["uid"]}},
                "status": {"conditions": [{
                    "type": "QuotaReserved", "status": "False", "reason": "Pending",
                    "message": "couldn't assign flavors to pod set node: insufficient unused "
                               "quota for cpu in flavor default-flavor, 2 more needed"}]}}

    def _kueue(self, controller: TrainJobController) -> None:
        """Kueue admits a queued TrainJob after ``admit_after_ticks`` reads (unsuspends it)."""
        labels = controller.job["metadata"].get("labels") or {}
        if not (self.kueue and labels.get("kueue.x-k8s.io/queue-name")
                and controller.job["spec"].get("suspend")):
            return
        key = (controller.namespace, controller.name)
        self.queued_ticks[key] = self.queued_ticks.get(key, 0) + 1
        if self.queued_ticks[key] > self.admit_after_ticks:
            controller.job["spec"]["suspend"] = False
            self.queued_ticks.pop(key)

    def suspend(self, name: str, namespace: str = "kubeflow", value: bool = True) -> None:
        """Kueue (or a user) suspends the TrainJob (``value`` False resumes it)."""
        self.trainjobs[(namespace, name)].job["spec"]["suspend"] = value

    # -- state ------------------------------------------------------------------------------

    def pods(self, namespace: str):
        yield from super().pods(namespace)
        for (ns, _), controller in list(self.trainjobs.items()):
            if ns == namespace:
                yield from list(controller.pods.values())

    def trainjob(self, name: str, namespace: str = "kubeflow") -> dict | None:
        """The TrainJob as stored now, or as it was when it was deleted."""
        controller = self.trainjobs.get((namespace, name))
        return controller.manifest() if controller else self.deleted_trainjobs.get(
            (namespace, name))

    def add_trainjob(self, body: dict) -> TrainJobController:
        """A TrainJob already on the cluster (created by an earlier try of the step)."""
        stored = copy.deepcopy(body)
        stored["spec"].setdefault("suspend", False)
        stored["metadata"].setdefault("uid", f"uid-{stored['metadata']['name']}")
        controller = TrainJobController(self, stored)
        self.trainjobs[(stored["metadata"]["namespace"], stored["metadata"]["name"])] = controller
        return controller

    def api_client(self):
        """A ``kubernetes`` ``ApiClient`` of this server (no urllib3 retries: our runner
        retries)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.retries = 0
        return client.ApiClient(configuration)

    def __exit__(self, *exc):
        for controller in list(self.trainjobs.values()):
            controller.delete()
        return super().__exit__(*exc)
