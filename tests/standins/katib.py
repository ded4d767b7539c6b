"""A stand-in for the Kubernetes API server with Katib v0.19.0 installed: the Experiment and
Trial endpoints the Katib launcher uses through the real Kubernetes client, recording every
call. It is no cluster; each rule cites the upstream file (kubeflow/katib tag v0.19.0 unless
said).

* Admission, in the API server's order (see tests/standins/kubernetes.py for the 404/400/422
  citations), then Katib's validating webhook: the namespace must carry
  ``katib.kubeflow.org/metrics-collector-injection: enabled``
  (pkg/webhook/v1beta1/experiment/validation_webhook.go lines 74-91) and the Experiment must
  pass the validator (validator.go; re-implemented in
  fmnist_kfp/kubernetes/experiment_webhook.py, whose own tests hold it to upstream); a refusal is
  HTTP 400 (validation_webhook.go lines 93-97, ``admission.Errored(
  http.StatusBadRequest, err)``); a second create of a name is 409.
* Conditions are cumulative, one per type; a re-set type moves to the end, Running flips to
  False before Succeeded/Failed (pkg/apis/controller/experiments/v1beta1/util.go lines 112-160,
  trials/v1beta1/util.go 124-155); reasons and messages from
  pkg/controller.v1beta1/experiment/util/status_util.go (no ``MaxFailedTrialsReached``: a
  max-failed stop is ``ExperimentFailed``).
* Two ways to play an Experiment: *scripted* statuses, one per read (the launcher's logic), or
  *run*: the controller suggests trials, renders each trial's TFJob from the template
  (pkg/controller.v1beta1/experiment/manifest/generator.go ``applyParameters``), runs it with
  the TFJob controller model (tests/standins/tfjob_operator.py) and real processes, wraps the
  primary pod's command as Katib's pod webhook does (:func:`katib_wrap`), collects the metrics as
  the StdOut collector does (:func:`collect`, :func:`observation`) and ends the Experiment by
  status_util.go's rules. Early stopping *decisions* are not modelled (the wrapper's early-stop
  branch is). ``run_processes=False`` runs the trials' pods as scripts (exit 0 after a few
  ticks) instead of real processes.
* The Experiment's status lists its trials by state (``pendingTrialList``, ``runningTrialList``,
  ...: pkg/controller.v1beta1/experiment/util/status_util.go lines 60-123; Go leaves empty
  lists out, ``omitempty``).
* A trial's TFJob is named after the trial (pkg/controller.v1beta1/experiment/manifest/
  generator.go lines 102-104) and is readable at the TFJob endpoint (404 ``NotFound`` when
  absent, as for any missing object).
* **TrainJob trials** (Katib 0.19 runs them: pkg/apis/controller/experiments/v1beta1/
  constants.go lines 38-59): a trial whose template is a TrainJob runs through the Trainer v2
  and JobSet stand-in's controllers (:class:`tests.standins.trainer_v2.TrainJobController`,
  with our runtime ``fmnist-tensorflow``); Katib's pod webhook wraps the pod its
  ``primaryPodLabels`` select (for a TrainJob, node 0's: Indexed Jobs label each pod with its
  ``batch.kubernetes.io/job-completion-index``); the trial is judged by the template's own
  ``failureCondition`` then ``successCondition`` (job_util.go lines 68-114, gjson on the job;
  the stand-in reads the ``status.conditions.#(type=="X")#|#(status=="True")#`` form, which is
  Katib's defaults' and ours): a TrainJob reports ``Complete``, never ``Succeeded``, so a
  template waiting for ``Succeeded`` leaves its trials Running, as Katib would.
* **Discovery**, for the launcher's choice of the trials' operator (the train step's rule):
  ``GET /apis/kubeflow.org/v1`` lists ``tfjobs`` when the Training Operator v1 is installed
  (``tfjob_operator``), ``GET /apis/trainer.kubeflow.org/v1alpha1`` lists Trainer v2's kinds
  when it is (``trainer``), a ClusterTrainingRuntime is readable by name (``runtimes``); a group
  not served is a bare 404 (kubernetes/apiserver ``pkg/endpoints/discovery``). No
  ``/openapi/v3``: the TrainJob shape is Trainer 2.1's (tests/standins/trainer_v2.py models
  2.2).
* ``watches_tfjobs=False`` is katib-controller started before the TFJob CRD existed: its trial
  controller skipped the TFJob watch (pkg/controller.v1beta1/trial/trial_controller.go lines
  103-127), so a trial is reconciled when it is created (its TFJob created, the trial marked
  Running: trial/util/job_util.go lines 111-115, trial_controller_util.go lines 121-127) and
  never again; its TFJob runs to the end unnoticed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tempfile
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.standins.kubernetes import Clock, FaultyServer, admission, selects, status_body
from tests.standins.loopback import recording_handler, reply_bytes, reply_json
from tests.standins.tfjob_operator import ROLE_LABEL, Kubelet, Pod, TFJobController, is_true

API_VERSION = "kubeflow.org/v1beta1"
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"  # pkg/controller.v1beta1/consts/const.go:67
TRIAL_LABEL = "katib.kubeflow.org/trial"  # pkg/controller.v1beta1/consts/const.go line 71
INJECTION_LABEL = "katib.kubeflow.org/metrics-collector-injection"
EXPERIMENT_WEBHOOK = "validator.experiment.katib.kubeflow.org"  # webhooks.yaml line 7
_EXPERIMENTS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/experiments"
                          r"(?:/([^/?]+))?")
_TRIALS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/trials(?:\?|$)")
_TFJOBS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/tfjobs/([^/?]+)$")
_TRAINER = "trainer.kubeflow.org/v1alpha1"
_TRAINJOBS = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/"
                        r"([^/?]+)$")
_RUNTIMES = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/clustertrainingruntimes/"
                       r"([^/?]+)$")
# gjson of the form Katib's default conditions have (experiments/v1beta1/constants.go 26-42).
_CONDITION = re.compile(r'status\.conditions\.#\(type=="(\w+)"\)#\|#\(status=="True"\)#')
# Katib's condition reasons and messages (pkg/controller.v1beta1/experiment/util/status_util.go
# lines 35-41 and 195-233; experiment_controller.go line 234).
_REASONS = {
    "Created": ("ExperimentCreated", "Experiment is created"),
    "Running": ("ExperimentRunning", "Experiment is running"),
    "Succeeded": ("ExperimentMaxTrialsReached",
                  "Experiment has succeeded because max trial count has reached"),
    "Failed": ("ExperimentFailed", "Experiment has failed because max failed count has reached"),
}
_NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
              "code": 404}
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's time.Time{} in RFC 3339
# Go's time.RFC3339Nano ("2006-01-02T15:04:05.999999999Z07:00"): on parsing, the fraction is
# optional; the zone is Z or ±hh:mm.
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


# ---------------------------------------------------------------------------------------------
# Objects shaped like Katib's


def set_condition(conditions: list[dict], type_: str, status: str, reason: str,
                  message: str) -> list[dict]:
    """experiments/v1beta1/util.go setCondition (lines 112-128): unchanged status and reason:
    nothing; else the type is removed and appended at the end."""
    current = next((c for c in conditions if c["type"] == type_), None)
    if current and current["status"] == status and current["reason"] == reason:
        return conditions
    return [c for c in conditions if c["type"] != type_] + [
        {"type": type_, "status": status, "reason": reason, "message": message}]


def finish(conditions: list[dict], type_: str, reason: str, message: str) -> list[dict]:
    """MarkExperimentStatusSucceeded/Failed (util.go lines 145-160), and the trial's
    (trials/v1beta1/util.go lines 150-155): Running to False first."""
    running = next((c for c in conditions if c["type"] == "Running"), None)
    if running is not None:
        conditions = set_condition(conditions, "Running", "False", running["reason"],
                                   running["message"])
    return set_condition(conditions, type_, "True", reason, message)


def _metrics(metrics: dict[str, float]) -> list[dict]:
    """Katib's observation: every value a string; this stand-in reports min/max = latest."""
    return [{"name": name, "latest": str(value), "min": str(value), "max": str(value)}
            for name, value in metrics.items()]


def trial(name: str, parameters: dict[str, str], metrics: dict[str, float] | None = None,
          condition: str = "Succeeded", experiment: str = "fmnist-tune",
          namespace: str = "team-a") -> dict:
    """A Trial as Katib writes it: the assignments as strings (``trialName`` among them, as the
    experiment's trial parameters reference it), the conditions in order, the observation."""
    conditions = set_condition([], "Created", "True", "TrialCreated", "Trial is created")
    if condition != "Created":
        conditions = set_condition(conditions, "Running", "True", "TrialRunning",
                                   "Trial is running")
    if condition not in ("Created", "Running"):
        conditions = finish(conditions, condition, f"Trial{condition}",
                            f"Trial is {condition.lower()}")
    status = {"conditions": conditions, "startTime": "2025-01-01T10:00:00Z"}
    if condition not in ("Created", "Running"):
        status["completionTime"] = "2025-01-01T10:05:30Z"
    if metrics:
        status["observation"] = {"metrics": _metrics(metrics)}
    assignments = {**parameters, "trialName": name}
    return {
        "apiVersion": API_VERSION, "kind": "Trial",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {EXPERIMENT_LABEL: experiment}},
        "spec": {"parameterAssignments": [{"name": k, "value": v}
                                          for k, v in assignments.items()]},
        "status": status,
    }


def state(condition: str, succeeded: int = 0, running: int = 0, failed: int = 0,
          early_stopped: int = 0, best: dict | None = None, reason: str = "",
          message: str = "", running_trials: tuple[str, ...] = (),
          pending_trials: tuple[str, ...] = ()) -> dict:
    """An Experiment status as Katib writes it; ``best`` is a :func:`trial` that becomes the
    ``currentOptimalTrial`` (Katib's placeholder, an empty one, when None); ``running_trials``
    and ``pending_trials`` name the trials in ``runningTrialList`` and ``pendingTrialList``
    (status_util.go lines 60-123; left out when empty)."""
    conditions = set_condition([], "Created", "True", *_REASONS["Created"])
    if condition != "Created":
        conditions = set_condition(conditions, "Running", "True", *_REASONS["Running"])
    if condition in ("Succeeded", "Failed"):
        default_reason, default_message = _REASONS[condition]
        conditions = finish(conditions, condition, reason or default_reason,
                            message or default_message)
    optimal = {"bestTrialName": "", "observation": {}}
    if best is not None:
        optimal = {"bestTrialName": best["metadata"]["name"],
                   "parameterAssignments": best["spec"]["parameterAssignments"],
                   "observation": best["status"].get("observation", {})}
    lists = {"runningTrialList": list(running_trials), "pendingTrialList": list(pending_trials)}
    return {
        "conditions": conditions, "startTime": "2025-01-01T10:00:00Z",
        "trials": succeeded + running + failed + early_stopped,
        "trialsSucceeded": succeeded, "trialsRunning": running, "trialsFailed": failed,
        "trialsEarlyStopped": early_stopped, "currentOptimalTrial": optimal,
        **{key: names for key, names in lists.items() if names},
    }


def katib_client_for(url: str):
    """The launcher's Katib client (the real Kubernetes client underneath), talking to the
    stand-in at ``url``."""
    from kubernetes import client

    from fmnist_kfp.katib.experiment_launcher import KatibApi

    configuration = client.Configuration()
    configuration.host = url
    configuration.retries = 0  # our runner retries; urllib3's silent ones would hide it
    return KatibApi(client.ApiClient(configuration))


# ---------------------------------------------------------------------------------------------
# The metrics collector and the pod webhook


def _parse_time(token: str) -> datetime | None:
    match = _RFC3339.fullmatch(token)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime.fromisoformat(f"{year}-{month}-{day}T{hour}:{minute}:{second}"
                                        f"{(fraction or '')[:7]}"
                                        f"{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        return None
    return moment


def collect(lines: list[str], metrics: list[str], pattern: str) -> list[tuple[str, str, str]]:
    """(timestamp, name, value) as Katib's StdOut collector records them:
    pkg/metricscollector/v1beta1/file-metricscollector/file-metricscollector.go lines 76-110:
    only lines containing a metric name; the first space-separated token is the time if it
    parses as RFC3339Nano, else ``0001-01-01T00:00:00Z``; every filter match whose name is a
    metric, in order."""
    found = []
    for line in lines:
        if not any(m in line for m in metrics):
            continue
        first, _, _ = line.partition(" ")
        stamp = first if " " in line and _parse_time(first) is not None else ZERO_TIME
        for match in re.finditer(pattern, line):
            name, value = match.group(1).strip(), match.group(2).strip()
            if name in metrics:
                found.append((stamp, name, value))
    return found


def observation(records: list[tuple[str, str, str]], metrics: list[str]) -> list[dict]:
    """A trial's observation from the stored rows: pkg/controller.v1beta1/trial/
    trial_controller_util.go lines 205-234: ``latest`` is the value with the greatest time,
    a tie going to the row read later (``!After``); min and max over values that parse as
    numbers. The rows come back ``ORDER BY time`` (pkg/db/v1beta1/mysql/mysql.go line 134)
    with no tie-breaker: ties keep their insertion order here, which upstream does not
    promise. An objective never seen is ``unavailable``."""
    rows = sorted(enumerate(records), key=lambda item: (_parse_time(item[1][0]) or
                                                        _parse_time(ZERO_TIME), item[0]))
    result = []
    for metric in metrics:
        values = [(stamp, value) for _, (stamp, name, value) in rows if name == metric]
        if not values:
            result.append({"name": metric, "latest": "unavailable", "min": "unavailable",
                           "max": "unavailable"})
            continue
        latest = values[-1][1]
        numbers = []
        for _, value in values:
            try:
                numbers.append(float(value))
            except ValueError:
                pass
        result.append({"name": metric, "latest": latest,
                       "min": str(min(numbers)) if numbers else "unavailable",
                       "max": str(max(numbers)) if numbers else "unavailable"})
    return result


def katib_wrap(command: list[str], metrics_file: str, early_stopping: bool) -> list[str]:
    """The primary container's command as Katib's pod webhook rewrites it for the StdOut
    collector (pkg/webhook/v1beta1/pod/utils.go ``wrapWorkerContainer`` lines 155-195,
    ``getEarlyStoppingCommand`` 201-215, ``getMarkCompletedCommand`` 217-221), then as the
    kubelet expands it (``$$`` becomes ``$``: kubernetes third_party/forked/golang/expansion/
    expand.go)."""
    args = list(command)
    shell = ["sh", "-c"]
    if args[:1] in (["sh"], ["bash"]) and args[1:2] == ["-c"]:
        shell, args = args[:2], args[2:]
    directory = str(Path(metrics_file).parent)
    args.append(f"1>{metrics_file} 2>&1")
    if early_stopping:
        args += ["||", f"if test -f {directory}/$$$$.pid && [ $(head -n 1 {directory}/$$.pid) "
                       "= early-stopped ]; then echo Training Container was Early Stopped; "
                       "else echo Training Container was Failed; exit 1; fi"]
    args += ["&&", f"echo completed > {directory}/$$$$.pid"]
    return shell + [kubernetes_expand(" ".join(args))]


def kubernetes_expand(text: str) -> str:
    """How the kubelet expands a container's command and args with no variables defined
    (kubernetes third_party/forked/golang/expansion/expand.go ``Expand`` and
    ``tryReadVariableName``): ``$$`` becomes ``$``; ``$(name)`` of an undefined name is kept
    as written, ``$$`` inside it too; any other ``$`` stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            if text[i + 1] == "(":
                end = text.find(")", i + 2)
                end = len(text) - 1 if end == -1 else end
                out.append(text[i:end + 1])
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# An Experiment that really runs


class ExperimentRun:
    """Katib's controllers for one Experiment, ticked on each read of it."""

    def __init__(self, experiment: dict, kubelet: Kubelet, clock, work_dir: Path, *,
                 run_processes: bool = True, watches_tfjobs: bool = True,
                 runtimes: dict | None = None):
        self.experiment = experiment
        self.runtimes = runtimes or {}  # the ClusterTrainingRuntimes, for TrainJob trials
        self.kubelet = kubelet
        self.clock = clock
        self.work_dir = work_dir
        self.run_processes = run_processes
        self.watches_tfjobs = watches_tfjobs
        self.judged: set[str] = set()  # trials reconciled at least once after their job
        self.status: dict = {}
        self.trials: dict[str, dict] = {}  # name -> Trial
        self.jobs: dict[str, TFJobController] = {}  # trial name -> its TFJob
        self.created = False

    @property
    def spec(self) -> dict:
        return self.experiment["spec"]

    @property
    def metrics(self) -> list[str]:
        objective = self.spec["objective"]
        return [objective["objectiveMetricName"], *objective.get("additionalMetricNames", [])]

    def tick(self) -> None:
        conditions = self.status.setdefault("conditions", [])
        if not self.created:
            self.created = True
            self.status["conditions"] = set_condition(conditions, "Created", "True",
                                                      *_REASONS["Created"])
            self.status["startTime"] = self.clock()
            return
        if is_true(conditions, "Succeeded") or is_true(conditions, "Failed"):
            return
        for name, job in self.jobs.items():
            job.tick()
            if self.watches_tfjobs or name not in self.judged:  # no watch: no event
                self._judge_trial(name, job)
                self.judged.add(name)
        self._suggest()
        self._update_status()

    def _suggest(self) -> None:
        """New trials while fewer than parallelTrialCount run and maxTrialCount is not
        reached; values spread over each feasible space, deterministic."""
        spec = self.spec
        active = sum(not self._finished(t) for t in self.trials.values())
        while (active < spec.get("parallelTrialCount", 3)
               and len(self.trials) < spec.get("maxTrialCount", 10 ** 9)):
            index = len(self.trials)
            # suggestionclient.go line 177: <experiment>-<8 random characters>.
            suffix = hashlib.sha256(f"{self.experiment['metadata']['name']}{index}".encode()
                                    ).hexdigest()[:8]
            name = f"{self.experiment['metadata']['name']}-{suffix}"
            assignments = {p["name"]: _suggest_value(p, index) for p in spec["parameters"]}
            self._create_trial(name, assignments)
            active += 1

    def _create_trial(self, name: str, assignments: dict[str, str]) -> None:
        namespace = self.experiment["metadata"]["namespace"]
        template = self.spec["trialTemplate"]
        text = json.dumps(template["trialSpec"])
        for parameter in template["trialParameters"]:  # generator.go applyParameters
            reference = parameter["reference"]
            value = (name if reference == "${trialSpec.Name}" else
                     namespace if reference == "${trialSpec.Namespace}" else
                     assignments[reference])
            text = text.replace("${trialParameters." + parameter["name"] + "}", value)
        job = json.loads(text)
        job["metadata"].update(name=name, namespace=namespace)
        run_spec = copy.deepcopy(job)
        primary = template.get("primaryPodLabels") or {ROLE_LABEL: "master"}
        early = "earlyStopping" in self.spec
        work = self.work_dir / name

        def katib_pod_webhook(controller: TFJobController, pod: Pod) -> None:
            """inject_webhook.go lines 149-195: every pod gets the trial label; only the
            primary pod (primaryPodLabels) is wrapped, with an emptyDir for the metrics file
            (here a directory of its own per pod)."""
            pod.labels[TRIAL_LABEL] = name
            if all(pod.labels.get(k) == v for k, v in primary.items()):
                log_dir = work / f"{pod.name}-{pod.uid[:8]}"
                log_dir.mkdir(parents=True, exist_ok=True)
                pod.command = katib_wrap(pod.command, str(log_dir / "metrics.log"), early)
                pod.env["KATIB_TRIAL_NAME"] = name
                pod.metrics_dir = log_dir

        if job["kind"] == "TrainJob":
            self.jobs[name] = TrainJobTrial(job, self, lambda pod: katib_pod_webhook(None, pod))
        else:
            self.jobs[name] = TFJobController(job, self.kubelet, self.clock,
                                              run_processes=self.run_processes,
                                              mutate_pod=katib_pod_webhook)
        conditions = set_condition([], "Created", "True", "TrialCreated", "Trial is created")
        self.trials[name] = {
            "apiVersion": API_VERSION, "kind": "Trial",
            "metadata": self._trial_metadata(name), "spec": self._trial_spec(assignments,
                                                                             run_spec),
            "status": {"conditions": conditions, "startTime": self.clock()},
        }

    def _trial_metadata(self, name: str) -> dict:
        """experiment_controller_util.go getTrialInstance (lines 39-56): the experiment's
        labels and its own, the experiment as controller owner."""
        experiment = self.experiment["metadata"]
        return {"name": name, "namespace": experiment["namespace"],
                "labels": {**experiment.get("labels", {}), EXPERIMENT_LABEL: experiment["name"]},
                "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Experiment",
                                     "name": experiment["name"],
                                     "uid": experiment.get("uid", "uid-experiment"),
                                     "controller": True, "blockOwnerDeletion": True}]}

    def _trial_spec(self, assignments: dict[str, str], run_spec: dict) -> dict:
        """getTrialInstance lines 58-94: what the experiment hands each trial (the fields Go
        omits when empty left out; no early-stopping rules: decisions are not modelled)."""
        template = self.spec["trialTemplate"]
        spec = {"objective": self.spec["objective"],
                "parameterAssignments": [{"name": k, "value": v}
                                         for k, v in assignments.items()],
                "runSpec": run_spec, "metricsCollector": self.spec["metricsCollectorSpec"]}
        optional = {"retainRun": template.get("retain"),
                    "primaryPodLabels": template.get("primaryPodLabels"),
                    "primaryContainerName": template.get("primaryContainerName")}
        spec.update({k: v for k, v in optional.items() if v})
        if template.get("successCondition") and template.get("failureCondition"):
            spec.update(successCondition=template["successCondition"],
                        failureCondition=template["failureCondition"])
        return spec

    @staticmethod
    def _finished(trial: dict) -> bool:
        return any(is_true(trial["status"]["conditions"], kind) for kind in
                   ("Succeeded", "Failed", "MetricsUnavailable", "EarlyStopped", "Killed"))

    def _judge_trial(self, name: str, job: TFJobController) -> None:
        """trial/util/job_util.go lines 68-114 (failure checked before success) and
        trial_controller_util.go lines 47-132; metrics come from the primary pod's file once
        its command completed (cmd/metricscollector main.go lines 424-430)."""
        trial = self.trials[name]
        if self._finished(trial):
            return
        status = trial["status"]
        conditions = job.status.get("conditions", [])
        template = self.spec["trialTemplate"]
        failure, success = (_condition_type(template[key])
                            for key in ("failureCondition", "successCondition"))
        failed = next((c for c in conditions if c["type"] == failure
                       and c["status"] == "True"), None)
        if failed is not None:
            status["conditions"] = finish(status["conditions"], "Failed",
                                          f"TrialFailed. Job reason: {failed['reason']}",
                                          f"Trial has failed. Job message: {failed['message']}")
            status["completionTime"] = self.clock()
            return
        if is_true(conditions, success):
            status["observation"] = {"metrics": observation(self._collected(job),
                                                            self.metrics)}
            objective = status["observation"]["metrics"][0]
            kind = "MetricsUnavailable" if objective["latest"] == "unavailable" else "Succeeded"
            status["conditions"] = finish(status["conditions"], kind,
                                          "TrialSucceeded" if kind == "Succeeded"
                                          else "MetricsUnavailable", f"Trial is {kind}")
            status["completionTime"] = self.clock()
            return
        status["conditions"] = set_condition(status["conditions"], "Running", "True",
                                             "TrialRunning", "Trial is running")

    def _collected(self, job: TFJobController) -> list[tuple[str, str, str]]:
        records = []
        for pod in job.pods.values():
            directory = getattr(pod, "metrics_dir", None)
            if directory is None or pod.process is None:
                continue
            marker = directory / f"{pod.process.pid}.pid"  # echo completed > $$.pid
            if marker.exists() and marker.read_text().strip() == "completed":
                pattern = self.spec["metricsCollectorSpec"]["source"]["filter"][
                    "metricsFormat"][0]
                lines = (directory / "metrics.log").read_text(errors="replace").splitlines()
                records += collect(lines, self.metrics, pattern)
        return records

    def _update_status(self) -> None:
        counts = {kind: 0 for kind in ("Succeeded", "Failed", "EarlyStopped",
                                       "MetricsUnavailable", "Killed")}
        running, pending = [], []
        for name, trial in sorted(self.trials.items()):
            conditions = trial["status"]["conditions"]
            kind = next((k for k in counts if is_true(conditions, k)), None)
            if kind:
                counts[kind] += 1
            elif is_true(conditions, "Running"):  # status_util.go lines 82-92
                running.append(name)
            else:
                pending.append(name)
        status = self.status
        status.update(trials=len(self.trials), trialsSucceeded=counts["Succeeded"],
                      trialsFailed=counts["Failed"], trialsEarlyStopped=counts["EarlyStopped"],
                      trialMetricsUnavailable=counts["MetricsUnavailable"],
                      trialsRunning=len(running), trialsPending=len(pending))
        for key, names in (("runningTrialList", running), ("pendingTrialList", pending)):
            if names:
                status[key] = names
            else:
                status.pop(key, None)
        status["currentOptimalTrial"] = self._optimal()
        # status_util.go UpdateExperimentStatusCondition, lines 187-235: goal, then max failed,
        # then max trials.
        spec = self.spec
        completed = sum(counts.values())
        failed = counts["Failed"] + counts["MetricsUnavailable"]
        most_failed = spec.get("maxFailedTrialCount")
        if self._goal_reached():
            status["conditions"] = finish(status["conditions"], "Succeeded",
                                          "ExperimentGoalReached", "Experiment has succeeded "
                                          "because Objective goal has reached")
        elif most_failed is not None and failed != 0 and failed >= most_failed:
            status["conditions"] = finish(status["conditions"], "Failed", *_REASONS["Failed"])
        elif completed >= spec.get("maxTrialCount", 10 ** 9):
            status["conditions"] = finish(status["conditions"], "Succeeded",
                                          *_REASONS["Succeeded"])
        else:
            status["conditions"] = set_condition(status["conditions"], "Running", "True",
                                                 *_REASONS["Running"])

    def _objective(self, trial: dict) -> float | None:
        objective = self.spec["objective"]
        name = objective["objectiveMetricName"]
        strategy = next((s["value"] for s in objective.get("metricStrategies", [])
                         if s["name"] == name), "latest")
        for metric in (trial["status"].get("observation") or {}).get("metrics", []):
            if metric["name"] == name:
                try:
                    return float(metric[strategy])
                except ValueError:
                    return None
        return None

    def _optimal(self) -> dict:
        maximize = self.spec["objective"]["type"] == "maximize"
        scored = [(self._objective(t), t) for t in self.trials.values()
                  if is_true(t["status"]["conditions"], "Succeeded")]
        scored = [(v, t) for v, t in scored if v is not None]
        if not scored:
            return {"bestTrialName": "", "observation": {}}
        _, best = (max if maximize else min)(scored, key=lambda item: item[0])
        return {"bestTrialName": best["metadata"]["name"],
                "parameterAssignments": best["spec"]["parameterAssignments"],
                "observation": best["status"]["observation"]}

    def _goal_reached(self) -> bool:
        goal = self.spec["objective"].get("goal")
        optimal = self.status.get("currentOptimalTrial") or {}
        if goal is None or not optimal.get("bestTrialName"):
            return False
        value = self._objective(self.trials[optimal["bestTrialName"]])
        maximize = self.spec["objective"]["type"] == "maximize"
        return value is not None and (value >= goal if maximize else value <= goal)

    def delete(self) -> None:
        for job in self.jobs.values():
            job.delete()


def _condition_type(gjson: str) -> str:
    """The condition type a trial template's success or failure condition asks for."""
    found = _CONDITION.fullmatch(gjson)
    if found is None:
        raise AssertionError(f"the Katib stand-in reads no condition {gjson!r}")
    return found[1]


class _TrainerHost:
    """What :class:`tests.standins.trainer_v2.TrainJobController` asks of its cluster: the
    kubelet, the clock, whether pods run real processes (else each exits 0 after a few
    ticks), and the ClusterTrainingRuntimes."""

    def __init__(self, run: ExperimentRun, runtimes: dict):
        self.kubelet, self.clock = run.kubelet, run.clock
        self.run_processes = run.run_processes
        self.scripts: dict = {}
        self.runtimes = runtimes


class TrainJobTrial:
    """A trial's TrainJob on the Trainer v2 stand-in, with Katib's pod webhook applied to each
    pod as it is created (before the kubelet starts it)."""

    def __init__(self, job: dict, run: ExperimentRun, mutate_pod):
        from tests.standins.trainer_v2 import TrainJobController

        job["spec"].setdefault("suspend", False)
        job["metadata"].setdefault("uid", f"uid-{job['metadata']['name']}")
        self.controller = TrainJobController(_TrainerHost(run, run.runtimes), job)
        self.mutate_pod = mutate_pod
        self.seen = 0

    @property
    def status(self) -> dict:
        return self.controller.status

    @property
    def pods(self) -> dict:
        return self.controller.pods

    def tick(self) -> None:
        self.controller.tick()
        created = self.controller.pods_created
        for pod in created[self.seen:]:
            self.mutate_pod(pod)
        self.seen = len(created)

    def manifest(self) -> dict:
        return self.controller.manifest()

    def delete(self) -> None:
        self.controller.delete()


def _suggest_value(parameter: dict, index: int) -> str:
    """Points spread over the feasible space: the middle, then the quarters, ..."""
    space = parameter["feasibleSpace"]
    if "list" in space:
        return space["list"][index % len(space["list"])]
    fractions = [0.5, 0.25, 0.75, 0.125, 0.875, 0.375, 0.625]
    fraction = fractions[index % len(fractions)]
    low, high = float(space["min"]), float(space["max"])
    if space.get("distribution") == "logUniform":
        value = low * (high / low) ** fraction
    else:
        value = low + (high - low) * fraction
    if parameter["parameterType"] == "int":
        step = int(space.get("step") or 1)
        return str(int(low) + round((value - low) / step) * step)
    return f"{value:.6g}"


# ---------------------------------------------------------------------------------------------
# The server


class KatibStandIn(FaultyServer):
    """``states`` are played back one per read (the last repeating) and ``trials`` listed;
    with ``run=True`` the Experiment really runs instead (see :class:`ExperimentRun`).
    ``namespaces``: those labelled for Katib's metrics-collector injection."""

    def __init__(self, states: list[dict] | None = None, trials: list[dict] | None = None, *,
                 run: bool = False, namespaces: tuple[str, ...] = ("team-a", "kubeflow"),
                 work_dir: Path | None = None, tfjobs: dict[str, dict] | None = None,
                 run_processes: bool = True, watches_tfjobs: bool = True,
                 tfjob_operator: bool = True, trainer: bool = False,
                 runtimes: dict | None = None):
        """``tfjob_operator``, ``trainer``: which training operators the cluster serves;
        ``runtimes``: its ClusterTrainingRuntimes by name (default with ``trainer``: ours, from
        manifests/trainer-runtime)."""
        self._init_faults()
        self.tfjob_operator, self.trainer = tfjob_operator, trainer
        if runtimes is None and trainer:
            from tests.standins.trainer_v2 import load_runtime

            runtime = load_runtime()
            runtimes = {runtime["metadata"]["name"]: runtime}
        self.runtimes = dict(runtimes or {})
        self.experiments: dict[tuple[str, str], dict] = {}  # (namespace, name) -> what we sent
        self.states = states or [state("Succeeded")]
        self.trials = trials or []
        self.tfjobs = dict(tfjobs or {})  # scripted: trial name -> its TFJob as stored
        self.run = run
        self.run_processes = run_processes
        self.watches_tfjobs = watches_tfjobs
        self.namespaces = set(namespaces)
        self.clock = Clock()
        self._tmp = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="katib-standin-")
            work_dir = Path(self._tmp.name)
        self.work_dir = work_dir
        self.kubelet = Kubelet(work_dir / "pods")
        self.runs: dict[tuple[str, str], ExperimentRun] = {}
        self.started: list[ExperimentRun] = []  # every run, deleted ones too
        self._reads = 0
        self._serve(recording_handler(self))

    def _webhook_problems(self, body: dict) -> list[str]:
        from fmnist_kfp.kubernetes.experiment_webhook import webhook_problems

        namespace = (body.get("metadata") or {}).get("namespace", "")
        if namespace not in self.namespaces:
            name = body["metadata"].get("name", "")
            return [f'Cannot create the Experiment "{name}" in namespace "{namespace}": the '
                    f'namespace lacks label "{INJECTION_LABEL}: enabled"']
        return webhook_problems(body)

    def on_post(self, handler, body: dict) -> None:
        match = _EXPERIMENTS.match(handler.path)
        if not match or match[3]:
            return reply_json(handler, _NOT_FOUND, 404)
        if self._fault(handler, "POST", "experiments"):
            return None
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["namespace"] = match[2]
        if admission(handler, body, match[1], group="kubeflow.org", served="v1beta1",
                     kind="Experiment", plural="experiments", webhook=EXPERIMENT_WEBHOOK,
                     webhook_code=400, problems=self._webhook_problems):
            return None
        key = (match[2], body["metadata"]["name"])
        with self.lock:
            if key in self.experiments:
                return reply_json(handler, status_body(
                    409, "AlreadyExists",
                    f'experiments.kubeflow.org "{key[1]}" already exists'), 409)
            body["metadata"].update(self._system_metadata(body))
            self.experiments[key] = body
            if self.run:
                self.runs[key] = ExperimentRun(body, self.kubelet, self.clock,
                                               self.work_dir / "trials",
                                               run_processes=self.run_processes,
                                               watches_tfjobs=self.watches_tfjobs,
                                               runtimes=self.runtimes)
                self.started.append(self.runs[key])
        reply_json(handler, body, 201)
        return None

    def _system_metadata(self, body: dict) -> dict:
        """What the API server adds on create and every read returns (so Katib's models parse
        it): uid and creationTimestamp (apiserver pkg/registry/rest/create.go
        ``FillObjectMetaSystemFields``), generation 1 (apiextensions-apiserver pkg/registry/
        customresource/strategy.go ``PrepareForCreate``), a resourceVersion, and the field
        manager's entry (the Kubernetes client sends no fieldManager: its user agent names it)."""
        now = "2025-01-01T09:59:00Z"  # fixed: the run's clock ticks per controller step
        fields = {f"f:{key}": {".": {}} for key in body.get("spec", {})}
        return {"uid": f"uid-experiment-{body['metadata']['name']}", "creationTimestamp": now,
                "generation": 1, "resourceVersion": str(len(self.experiments) + 1),
                "managedFields": [{
                    "apiVersion": API_VERSION, "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": fields},
                    "manager": "OpenAPI-Generator", "operation": "Update", "time": now}]}

    def _discovery(self, handler, path: str) -> bool:
        """API discovery and the runtimes (the module docstring); True when it answered."""
        lists = {}
        if self.tfjob_operator:
            lists["/apis/kubeflow.org/v1"] = ("kubeflow.org/v1", [("tfjobs", "TFJob", True)])
        if self.trainer:
            lists[f"/apis/{_TRAINER}"] = (_TRAINER, [
                ("trainjobs", "TrainJob", True), ("trainingruntimes", "TrainingRuntime", True),
                ("clustertrainingruntimes", "ClusterTrainingRuntime", False)])
        lists["/apis/kubeflow.org/v1beta1"] = ("kubeflow.org/v1beta1", [
            ("experiments", "Experiment", True), ("trials", "Trial", True)])
        if path in lists:
            group_version, resources = lists[path]
            reply_json(handler, {"kind": "APIResourceList", "apiVersion": "v1",
                                 "groupVersion": group_version, "resources": [
                                     {"name": name, "kind": kind, "namespaced": namespaced,
                                      "singularName": "", "verbs": ["get", "list", "create"]}
                                     for name, kind, namespaced in resources]})
            return True
        if re.fullmatch(r"/apis/[^/]+/[^/]+/?", path) or path.startswith("/openapi/"):
            reply_bytes(handler, b"404 page not found\n", 404, "text/plain; charset=utf-8")
            return True
        if (match := _RUNTIMES.match(path)) and self.trainer:
            runtime = self.runtimes.get(match[1])
            if runtime is None:
                reply_json(handler, status_body(
                    404, "NotFound", f'clustertrainingruntimes.trainer.kubeflow.org "{match[1]}" '
                    "not found"), 404)
            else:
                reply_json(handler, copy.deepcopy(runtime))
            return True
        if (match := _TRAINJOBS.match(path)) and self.trainer:
            job = next((run.jobs[match[2]].manifest() for (ns, _), run in list(self.runs.items())
                        if ns == match[1] and isinstance(run.jobs.get(match[2]), TrainJobTrial)),
                       None)
            if job is None:
                reply_json(handler, status_body(
                    404, "NotFound", f'trainjobs.trainer.kubeflow.org "{match[2]}" not found'),
                    404)
            else:
                reply_json(handler, job)
            return True
        return False

    def on_get(self, handler) -> None:
        path = urlsplit(handler.path).path
        if self._discovery(handler, path):
            return None
        if (match := _EXPERIMENTS.match(path)) and match[3]:
            if self._fault(handler, "GET", "experiments"):
                return None
            key = (match[2], match[3])
            experiment = self.experiments.get(key)
            if experiment is None or match[1] != "v1beta1":
                return reply_json(handler, _NOT_FOUND, 404)
            with self.lock:
                reply_json(handler, self._with_status(key, experiment))
                if key in self.runs:
                    self.runs[key].tick()  # the controllers act after the read: status lags
            return None
        if match := _TFJOBS.match(path):
            if self._fault(handler, "GET", "tfjobs"):
                return None
            job = self._tfjob(match[2], match[3]) if match[1] == "v1" else None
            if job is None:
                return reply_json(handler, status_body(
                    404, "NotFound", f'tfjobs.kubeflow.org "{match[3]}" not found'), 404)
            return reply_json(handler, job)
        if match := _TRIALS.match(handler.path):
            if self._fault(handler, "GET", "trials"):
                return None
            selector = parse_qs(urlsplit(handler.path).query).get("labelSelector", [""])[0]
            items = [t for t in self._trials(match[2])
                     if selects(selector, t["metadata"].get("labels", {}))]
            return reply_json(handler, {"apiVersion": API_VERSION, "kind": "TrialList",
                                        "metadata": {}, "items": items})
        return reply_json(handler, _NOT_FOUND, 404)

    def on_delete(self, handler) -> None:
        match = _EXPERIMENTS.match(handler.path)
        if self._fault(handler, "DELETE", "experiments"):
            return None
        if match and match[3]:
            with self.lock:
                found = self.experiments.pop((match[2], match[3]), None)
                run = self.runs.pop((match[2], match[3]), None)
            if run is not None:
                run.delete()
            if found is not None:
                return reply_json(handler, {"kind": "Status", "apiVersion": "v1",
                                            "status": "Success"})
        return reply_json(handler, _NOT_FOUND, 404)

    def _with_status(self, key, experiment: dict) -> dict:
        if key in self.runs:
            return {**copy.deepcopy(experiment),
                    "status": json.loads(json.dumps(self.runs[key].status))}
        status = self.states[min(self._reads, len(self.states) - 1)]
        self._reads += 1
        return {**copy.deepcopy(experiment), "status": status}

    def _tfjob(self, namespace: str, name: str) -> dict | None:
        """A trial's TFJob (named after the trial) as stored: a running Experiment's, else a
        scripted one."""
        for (ns, _), run in list(self.runs.items()):
            if ns == namespace and name in run.jobs:
                return run.jobs[name].manifest()
        job = self.tfjobs.get(name)
        return copy.deepcopy(job) if job and job["metadata"]["namespace"] == namespace else None

    def _trials(self, namespace: str) -> list[dict]:
        found = [t for t in self.trials if t["metadata"]["namespace"] == namespace]
        for (ns, _), run in list(self.runs.items()):
            if ns == namespace:
                found += [copy.deepcopy(t) for t in run.trials.values()]
        return found

    def add_experiment(self, name: str, namespace: str = "team-a", **spec) -> None:
        """An Experiment already on the cluster (created by an earlier try of the step)."""
        self.experiments[(namespace, name)] = {
            "apiVersion": API_VERSION, "kind": "Experiment",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }

    def katib_client(self):
        return katib_client_for(self.url)

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        for run in list(self.runs.values()):
            run.delete()
        self.kubelet.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        return result
