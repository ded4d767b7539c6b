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
* The Experiment's statuses are scripted, one per read (the launcher's logic); Katib's own
  controllers, suggestion services and collector run for real on the local cluster
  (tests/katib/test_katib_on_the_cluster.py, tests/pipelines/test_pipeline_on_the_cluster.py).
  This stand-in keeps what only it can script: faults, progress lines, a stalled trial, a
  trial's parameter budget. :func:`katib_wrap` and :func:`collect` are Katib's pod webhook
  wrapper and StdOut collector's parsing, for the trial process's own tests.
* The Experiment's status lists its trials by state (``pendingTrialList``, ``runningTrialList``,
  ...: pkg/controller.v1beta1/experiment/util/status_util.go lines 60-123; Go leaves empty
  lists out, ``omitempty``).
* A trial's TFJob is named after the trial (pkg/controller.v1beta1/experiment/manifest/
  generator.go lines 102-104) and is readable at the TFJob endpoint (404 ``NotFound`` when
  absent, as for any missing object).
* **Discovery**, for the launcher's choice of the trials' operator (the train step's rule):
  ``GET /apis/kubeflow.org/v1`` lists ``tfjobs`` when the Training Operator v1 is installed
  (``tfjob_operator``), ``GET /apis/trainer.kubeflow.org/v1alpha1`` lists Trainer v2's kinds
  when it is (``trainer``), a ClusterTrainingRuntime is readable by name (``runtimes``); a group
  not served is a bare 404 (kubernetes/apiserver ``pkg/endpoints/discovery``). No
  ``/openapi/v3``: the TrainJob shape is Trainer 2.1's.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fmnist_kfp.preflight.katib import INJECTION_LABEL
from tests.standins.kubernetes import FaultyServer, admission, selects, status_body
from tests.standins.loopback import recording_handler, reply_bytes, reply_json

API_VERSION = "kubeflow.org/v1beta1"
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"  # pkg/controller.v1beta1/consts/const.go:67
TRIAL_LABEL = "katib.kubeflow.org/trial"  # pkg/controller.v1beta1/consts/const.go line 71
EXPERIMENT_WEBHOOK = "validator.experiment.katib.kubeflow.org"  # webhooks.yaml line 7
_EXPERIMENTS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/experiments"
                          r"(?:/([^/?]+))?")
_TRIALS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/trials(?:\?|$)")
_TFJOBS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/tfjobs/([^/?]+)$")
_TRAINER = "trainer.kubeflow.org/v1alpha1"
_RUNTIMES = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/clustertrainingruntimes/"
                       r"([^/?]+)$")
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
# The server


class KatibStandIn(FaultyServer):
    """``states`` are played back one per read (the last repeating), ``trials`` listed, and
    ``tfjobs`` (by trial name) readable where a trial's TFJob is. ``namespaces``: those
    labelled for Katib's metrics-collector injection. (Experiments that really run: Katib
    itself, tests/katib/test_katib_on_the_cluster.py.)"""

    def __init__(self, states: list[dict] | None = None, trials: list[dict] | None = None, *,
                 namespaces: tuple[str, ...] = ("team-a", "kubeflow"),
                 tfjobs: dict[str, dict] | None = None, tfjob_operator: bool = True,
                 trainer: bool = False, runtimes: dict | None = None):
        """``tfjob_operator``, ``trainer``: which training operators the cluster serves;
        ``runtimes``: its ClusterTrainingRuntimes by name (default with ``trainer``: ours, from
        manifests/trainer-runtime)."""
        self._init_faults()
        self.tfjob_operator, self.trainer = tfjob_operator, trainer
        if runtimes is None and trainer:
            from tests.setup_manifests import build

            [runtime] = build("trainer-runtime")
            runtimes = {runtime["metadata"]["name"]: runtime}
        self.runtimes = dict(runtimes or {})
        self.experiments: dict[tuple[str, str], dict] = {}  # (namespace, name) -> what we sent
        self.states = states or [state("Succeeded")]
        self.trials = trials or []
        self.tfjobs = dict(tfjobs or {})  # trial name -> its TFJob as stored
        self.namespaces = set(namespaces)
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
        reply_json(handler, body, 201)
        return None

    def _system_metadata(self, body: dict) -> dict:
        """What the API server adds on create and every read returns (so Katib's models parse
        it): uid and creationTimestamp (apiserver pkg/registry/rest/create.go
        ``FillObjectMetaSystemFields``), generation 1 (apiextensions-apiserver pkg/registry/
        customresource/strategy.go ``PrepareForCreate``), a resourceVersion, and the field
        manager's entry (the Kubernetes client sends no fieldManager: its user agent names it)."""
        now = "2025-01-01T09:59:00Z"  # fixed: the scripted statuses' times are after it
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
                reply_json(handler, self._with_status(experiment))
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
            if found is not None:
                return reply_json(handler, {"kind": "Status", "apiVersion": "v1",
                                            "status": "Success"})
        return reply_json(handler, _NOT_FOUND, 404)

    def _with_status(self, experiment: dict) -> dict:
        status = self.states[min(self._reads, len(self.states) - 1)]
        self._reads += 1
        return {**copy.deepcopy(experiment), "status": status}

    def _tfjob(self, namespace: str, name: str) -> dict | None:
        """A trial's TFJob (named after the trial) as stored."""
        job = self.tfjobs.get(name)
        return copy.deepcopy(job) if job and job["metadata"]["namespace"] == namespace else None

    def _trials(self, namespace: str) -> list[dict]:
        return [t for t in self.trials if t["metadata"]["namespace"] == namespace]

    def add_experiment(self, name: str, namespace: str = "team-a", **spec) -> None:
        """An Experiment already on the cluster (created by an earlier try of the step)."""
        self.experiments[(namespace, name)] = {
            "apiVersion": API_VERSION, "kind": "Experiment",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }

    def katib_client(self):
        return katib_client_for(self.url)
