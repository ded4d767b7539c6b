"""A small model of the Kubeflow training operator's TFJob controller and of the kubelet, for
the API stand-ins (tests/standins/kubernetes.py, tests/standins/katib.py). It is no cluster: it
keeps only the rules our code depends on, each citing kubeflow/trainer v1.9.2 (the Go code is the
same in v1.9.0 and v1.9.1).

Pods are either *scripted* (each incarnation of a replica exits with the next code of its
script after a few ticks) or *processes*: the container's command really runs on this machine
with the environment the operator injects (``TF_CONFIG``), its output is the pod's log. The
controller acts on ticks (the stand-ins tick it on each read of the job), so status always lags
the writes that caused it, as it does on a cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests import ROOT

CONTAINER = "tensorflow"  # tensorflow_types.go: TFJobDefaultContainerName
DEFAULT_PORT = 2222  # tensorflow_types.go: TFJobDefaultPort
# common_types.go v1.9.2 lines 25-37: the labels the operator puts on every pod.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
TYPE_LABEL = "training.kubeflow.org/replica-type"
INDEX_LABEL = "training.kubeflow.org/replica-index"
ROLE_LABEL = "training.kubeflow.org/job-role"
# tfjob_controller.go UpdateJobStatus v1.9.2 lines 419-425: the order replica types are visited.
TYPE_ORDER = ("Chief", "Evaluator", "Master", "PS", "Worker")


def set_condition(conditions: list[dict], type_: str, status: str, reason: str, message: str,
                  now: str) -> list[dict]:
    """kubeflow/trainer v1.9.2 pkg/util/status.go setCondition/filterOutCondition (lines
    103-145): nothing changes once Failed=True; one condition per type, re-set ones move to the
    end; Running and Restarting remove each other; Succeeded or Failed flip Running to False in
    place; the transition time is kept when the status does not change."""
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions):
        return conditions
    current = next((c for c in conditions if c["type"] == type_), None)
    if current and current["status"] == status and current["reason"] == reason:
        return conditions
    new = {"type": type_, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now}
    if current and current["status"] == status:
        new["lastTransitionTime"] = current["lastTransitionTime"]
    kept = []
    for c in conditions:
        if c["type"] == type_ or {type_, c["type"]} == {"Running", "Restarting"}:
            continue
        if type_ in ("Failed", "Succeeded") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    return kept + [new]


def is_true(conditions: list[dict], type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


@dataclass
class Pod:
    """A pod of one replica; ``phase`` as the kubelet reports it."""

    name: str
    namespace: str
    labels: dict[str, str]
    rtype: str
    index: int
    env: dict[str, str]
    command: list[str]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: str = ""  # metadata.creationTimestamp, the stand-ins' clock
    phase: str = "Pending"
    exit_code: int | None = None
    restart_count: int = 0
    ticks_running: int = 0
    # Scripted incarnations: an exit code, or (exit code, ticks running) for this incarnation.
    script: list = field(default_factory=list)
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    log_text: str = ""
    metrics_dir: Path | None = None  # Katib's emptyDir on a wrapped primary pod
    # The pod's restartPolicy: ExitCode becomes Never (kubeflow/trainer v1.9.2 pkg/core/pod.go
    # SetRestartPolicy, lines 81-88), anything else is copied.
    restart_policy: str = "Never"
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = "default-scheduler"

    def manifest(self) -> dict:
        state = ({"terminated": {"exitCode": self.exit_code}} if self.exit_code is not None
                 else {"running": {}} if self.phase == "Running" else {"waiting": {}})
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid,
                         **({"creationTimestamp": self.created} if self.created else {}),
                         "labels": dict(self.labels), "annotations": dict(self.annotations)},
            "spec": {"containers": [{"name": CONTAINER, "command": list(self.command)}],
                     "schedulerName": self.scheduler_name},
            "status": {"phase": self.phase, "containerStatuses": [
                {"name": CONTAINER, "restartCount": self.restart_count, "state": state,
                 "ready": self.phase == "Running", "image": "", "imageID": ""}]},
        }

    def log(self) -> str:
        if self.log_path is not None and self.log_path.exists():
            return self.log_path.read_text(errors="replace")
        return self.log_text


class Kubelet:
    """Runs pods: scripted ones exit with their next code after ``running_ticks`` ticks; process
    pods run their container command here, ``python`` being this interpreter's (the image's
    interpreter, with the package importable)."""

    def __init__(self, work_dir: Path, running_ticks: int = 2):
        self.work_dir = work_dir
        self.running_ticks = running_ticks
        self.processes: list[subprocess.Popen] = []

    def start(self, pod: Pod, run_process: bool) -> None:
        pod.phase = "Running"
        if not run_process:
            return
        self.work_dir.mkdir(parents=True, exist_ok=True)
        pod.log_path = self.work_dir / f"{pod.name}-{pod.uid[:8]}.log"
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(ROOT)  # the image has the package installed
        env["HOME"] = str(self.work_dir)
        env.update(pod.env)
        with open(pod.log_path, "wb") as log:
            pod.process = subprocess.Popen(pod.command, env=env, cwd=self.work_dir, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(pod.process)

    def step(self, pod: Pod) -> None:
        """Advances a running pod: a process that exited, or a scripted pod whose time is up,
        terminates with its exit code (a signal counts as 128 + its number, as the container
        runtime reports it). Under the pod restartPolicy OnFailure (or Always) the kubelet
        restarts the container in place instead and counts it in ``restartCount``."""
        if pod.phase != "Running":
            return
        if pod.process is not None:
            code = pod.process.poll()
            if code is None:
                return
            code = 128 - code if code < 0 else code
        else:
            pod.ticks_running += 1
            step = pod.script[0] if pod.script else 0
            code, ticks = step if isinstance(step, tuple) else (step, self.running_ticks)
            if pod.ticks_running < ticks:
                return
            if pod.script:
                pod.script.pop(0)
        if code != 0 and pod.restart_policy in ("OnFailure", "Always"):
            pod.restart_count += 1
            pod.ticks_running = 0
            if pod.process is not None:
                self.start(pod, run_process=True)
            return
        pod.exit_code = code
        pod.phase = "Succeeded" if code == 0 else "Failed"

    def kill(self, pod: Pod) -> None:
        if pod.process is not None and pod.process.poll() is None:
            stop(pod.process)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                stop(process)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the pod's process group, SIGKILL after a bounded grace period."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _free_port() -> int:
    """A port a pod's process binds later: chosen as the local launcher chooses them."""
    from fmnist_kfp.launcher.local_processes import free_ports

    return free_ports(1)[0]


class TFJobController:
    """One TFJob's controller, reconciled once per :meth:`tick`. ``scripts`` maps
    ``"worker-0"``-style replica names to the exit codes of successive incarnations of that
    pod, each an ``int`` or ``(code, ticks running)`` (default: exit 0); ``run_processes``
    runs the real commands instead."""

    def __init__(self, job: dict, kubelet: Kubelet, clock, *, scripts: dict | None = None,
                 run_processes: bool = False, mutate_pod=None):
        self.job = job
        self.kubelet = kubelet
        self.clock = clock
        self.scripts = {k: list(v) for k, v in (scripts or {}).items()}
        self.run_processes = run_processes
        self.mutate_pod = mutate_pod  # e.g. Katib's pod webhook (tests/standins/katib.py)
        self.pods: dict[str, Pod] = {}
        # Every pod ever created, deleted ones too (a test reads what each was given).
        self.pods_created: list[Pod] = []
        self.status: dict = {}
        self.created_seen = False
        # Headless services have stable names; on this machine a loopback port stands for each.
        self.ports = {(rtype, i): _free_port() for rtype, spec in self.replicas.items()
                      for i in range(spec.get("replicas", 1))}
        self.lock = threading.RLock()

    @property
    def name(self) -> str:
        return self.job["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.job["metadata"]["namespace"]

    @property
    def replicas(self) -> dict[str, dict]:
        return self.job["spec"]["tfReplicaSpecs"]

    def _restart_policy(self, rtype: str) -> str:
        # tensorflow_defaults.go v1.9.2 line 68: defaulted in memory to Never.
        return self.replicas[rtype].get("restartPolicy") or "Never"

    def _tf_config(self, rtype: str, index: int) -> dict[str, str]:
        """tensorflow.go v1.9.2 lines 136-184: the cluster spec lists every replica type in
        lowercase, task {type, index}, environment "cloud"; only for distributed jobs
        (util.go isDistributed, lines 74-95) and only on the ``tensorflow`` container. The
        endpoint ``<job>-<type>-<i>.<ns>.svc:2222`` is a loopback port here."""
        total = sum(spec.get("replicas", 1) for spec in self.replicas.values())
        if total == 1:
            return {}
        cluster = {
            rt.lower(): [f"127.0.0.1:{self.ports[(rt, i)]}"
                         for i in range(spec.get("replicas", 1))]
            for rt, spec in sorted(self.replicas.items())
        }
        config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
                  "environment": "cloud"}
        return {"TF_CONFIG": json.dumps(config, sort_keys=True)}

    def _new_pod(self, rtype: str, index: int) -> Pod:
        """pod.go v1.9.2 lines 402-414: name <job>-<type>-<i>, the job's labels plus replica
        type (lowercase) and index, and job-role=master on the Chief/Master (or on Worker 0
        when there is neither: tfjob_controller.go IsMasterRole, lines 598-604)."""
        rt = rtype.lower()
        container = next(c for c in self.replicas[rtype]["template"]["spec"]["containers"]
                         if c["name"] == CONTAINER)
        labels = dict((self.replicas[rtype]["template"].get("metadata") or {})
                      .get("labels") or {})
        labels.update({OPERATOR_LABEL: "tfjob-controller", JOB_NAME_LABEL: self.name,
                       TYPE_LABEL: rt, INDEX_LABEL: str(index)})
        has_chief = any(t in ("Chief", "Master") for t in self.replicas)
        if (rtype in ("Chief", "Master")) if has_chief else (rtype == "Worker" and index == 0):
            labels[ROLE_LABEL] = "master"
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        env.update(self._tf_config(rtype, index))
        pod = Pod(name=f"{self.name}-{rt}-{index}", namespace=self.namespace, labels=labels,
                  created=self._now(),
                  rtype=rtype, index=index, env=env,
                  command=list(container.get("command") or []) + list(
                      container.get("args") or []),
                  script=self.scripts.get(f"{rt}-{index}", []),
                  restart_policy="Never" if self._restart_policy(rtype) == "ExitCode"
                  else self._restart_policy(rtype))
        template_spec = self.replicas[rtype]["template"]["spec"]
        pod.scheduler_name = template_spec.get("schedulerName") or "default-scheduler"
        if self.mutate_pod is not None:
            self.mutate_pod(self, pod)
        return pod

    def tick(self) -> None:
        """The kubelet advances every pod, then the controller reconciles once."""
        with self.lock:
            for pod in self.pods.values():
                if pod.phase == "Pending":
                    self.kubelet.start(pod, self.run_processes)
                else:
                    self.kubelet.step(pod)
            self._reconcile()

    def _now(self) -> str:
        return self.clock()

    def _condition(self, type_: str, reason: str, message: str, status: str = "True") -> None:
        self.status["conditions"] = set_condition(self.status.get("conditions", []), type_,
                                                  status, reason, message, self._now())

    def _reconcile(self) -> None:
        conditions = self.status.setdefault("conditions", [])
        if not self.created_seen:
            # tfjob_controller.go onOwnerCreateFunc, lines 652-659: Created, with the name only.
            self.created_seen = True
            self._condition("Created", "TFJobCreated", f"TFJob {self.name} is created.")
        if is_true(conditions, "Succeeded") or is_true(conditions, "Failed"):
            self._clean_up_finished()
            return
        if (self.job["spec"].get("runPolicy") or {}).get("suspend"):
            # common/job.go v1.9.2 lines 146-166: a suspended job's pods are deleted — every
            # one, whatever cleanPodPolicy says, the job being unfinished (DeletePodsAndServices,
            # lines 43-69), each replica type's active count set to 0; Running goes False
            # and Suspended True, both reason TFJobSuspended. Resumed (Kueue's re-admission),
            # every pod is created anew under a new UID (below).
            for pod in list(self.pods.values()):
                self._delete_pod(pod)
            for counts in (self.status.get("replicaStatuses") or {}).values():
                counts["active"] = 0
            message = f"TFJob {self.name} is suspended."
            if is_true(conditions, "Running"):
                self._condition("Running", "TFJobSuspended", message, status="False")
            if not is_true(self.status["conditions"], "Suspended"):
                self._condition("Suspended", "TFJobSuspended", message)
            self.status.pop("startTime", None)
            return
        if is_true(conditions, "Suspended"):
            # job.go lines 167-173: resumed, startTime reset; pods are created below.
            self._condition("Suspended", "TFJobResumed", f"TFJob {self.name} is resumed.",
                            status="False")
            self.status["startTime"] = self._now()
        if self._past_backoff_limit():
            # common/job.go v1.9.2 lines 185-245: pods deleted, then Failed.
            for pod in list(self.pods.values()):
                self._delete_pod(pod)
            self._condition("Failed", "TFJobFailed", f"Job {self.name} has failed because it "
                            "has reached the specified backoff limit")
            return
        replica_statuses = {}
        for rtype in TYPE_ORDER:
            if rtype in self.replicas:
                replica_statuses[rtype] = self._reconcile_pods(rtype)
        self.status["replicaStatuses"] = replica_statuses
        self._update_job_status(replica_statuses)

    def _past_backoff_limit(self) -> bool:
        """common/job.go v1.9.2 lines 176-198 with FakeWorkQueue.NumRequeues() == 0
        (fake_workqueue.go line 56): a new pod failure only exceeds backoffLimit 0; and
        core/job.go PastBackoffLimit (lines 95-133): the restart counts of running pods
        (OnFailure/Always; always 0 under ExitCode, whose pods are recreated)."""
        limit = (self.job["spec"].get("runPolicy") or {}).get("backoffLimit")
        if limit is None:
            return False
        pods = list(self.pods.values())
        failed = sum(p.phase == "Failed" for p in pods)
        previous = sum(s.get("failed", 0) for s in
                       (self.status.get("replicaStatuses") or {}).values())
        total = sum(spec.get("replicas", 1) for spec in self.replicas.values())
        active = sum(p.phase in ("Pending", "Running") for p in pods)
        if failed > previous and active != total and 1 > limit:
            return True
        restarts = sum(p.restart_count for p in pods if p.phase == "Running")
        return restarts > 0 if limit == 0 else restarts >= limit

    def _reconcile_pods(self, rtype: str) -> dict[str, int]:
        """common/pod.go ReconcilePods v1.9.2 lines 310-378: create missing pods; a Failed pod
        is deleted and the job set Restarting when its exit code is retryable under ExitCode
        (>= 128, train_util.go lines 24-26; no terminated status counts as 0xbeef) or the
        policy is OnFailure/Always; under ExitCode a code of 1-127 fails the job."""
        counts = {"active": 0, "succeeded": 0, "failed": 0}
        policy = self._restart_policy(rtype)
        for index in range(self.replicas[rtype].get("replicas", 1)):
            name = f"{self.name}-{rtype.lower()}-{index}"
            pod = self.pods.get(name)
            if pod is None:
                self.pods[name] = self._new_pod(rtype, index)
                self.pods_created.append(self.pods[name])
                continue
            code = 0xBEEF if pod.exit_code is None else pod.exit_code
            if pod.phase == "Failed":
                if policy == "ExitCode" and code >= 128 or policy in ("OnFailure", "Always"):
                    self._delete_pod(pod)
                    self._condition("Restarting", "TFJobRestarting",
                                    f"job {self.name} is restarting because {rtype} replica(s) "
                                    "failed.")
                elif policy == "ExitCode":
                    self._condition("Failed", "TFJobFailed",
                                    f'job "{self.name}" is failing because "{rtype}" '
                                    "replica(s) failed.")
            # core/status.go UpdateJobReplicaStatuses, lines 30-48.
            if pod.phase == "Running":
                counts["active"] += 1
            elif pod.phase == "Succeeded":
                counts["succeeded"] += 1
            elif pod.phase == "Failed":
                counts["failed"] += 1
        return counts

    def _update_job_status(self, replica_statuses: dict[str, dict[str, int]]) -> None:
        """tfjob_controller.go UpdateJobStatus v1.9.2 lines 385-515."""
        self.status.setdefault("startTime", self._now())
        existing = next((c for c in self.status["conditions"] if c["type"] == "Restarting"),
                        None)
        has_chief = any(t in ("Chief", "Master") for t in self.replicas)
        namespaced = f"{self.namespace}/{self.name}"
        for rtype, counts in replica_statuses.items():
            expected = self.replicas[rtype].get("replicas", 1) - counts["succeeded"]
            if has_chief:
                if rtype in ("Chief", "Master"):
                    if counts["active"] > 0:
                        self._condition("Running", "TFJobRunning",
                                        f"TFJob {namespaced} is running.")
                    if expected == 0:
                        self._succeeded(namespaced)
            elif rtype == "Worker":
                worker0 = self.pods.get(f"{self.name}-worker-0")
                worker0_done = bool(worker0 and worker0.phase == "Succeeded"
                                    and worker0.exit_code == 0)
                policy = self.job["spec"].get("successPolicy") or ""
                if expected == 0 or (worker0_done and policy != "AllWorkers"):
                    self._succeeded(namespaced)
                elif counts["active"] > 0:
                    self._condition("Running", "TFJobRunning", f"TFJob {namespaced} is running.")
            if counts["failed"] > 0:
                if existing is not None:
                    self._condition("Restarting", existing["reason"], existing["message"])
                else:
                    self._condition("Failed", "TFJobFailed",
                                    f"TFJob {namespaced} has failed because {counts['failed']} "
                                    f"{rtype} replica(s) failed.")

    def _succeeded(self, namespaced: str) -> None:
        self.status.setdefault("completionTime", self._now())
        self._condition("Succeeded", "TFJobSucceeded", f"TFJob {namespaced} successfully "
                        "completed.")

    def _clean_up_finished(self) -> None:
        """common/job.go DeletePodsAndServices v1.9.2 lines 40-66: cleanPodPolicy None keeps
        every pod, Running deletes the running and pending ones, All deletes all (the TFJob
        default is None: tensorflow_defaults.go lines 52-53)."""
        policy = (self.job["spec"].get("runPolicy") or {}).get("cleanPodPolicy") or "None"
        for pod in list(self.pods.values()):
            if policy == "All" or policy == "Running" and pod.phase in ("Running", "Pending"):
                self._delete_pod(pod)

    def _delete_pod(self, pod: Pod) -> None:
        self.kubelet.kill(pod)
        self.pods.pop(pod.name, None)

    def delete(self) -> None:
        """Deleting the TFJob garbage-collects its pods (owner references)."""
        with self.lock:
            for pod in list(self.pods.values()):
                self._delete_pod(pod)

    def manifest(self) -> dict:
        with self.lock:
            return {**self.job, "status": json.loads(json.dumps(self.status))}
