"""A stand-in for the Kubernetes API server: just the Katib Experiment and Trial endpoints the
Katib launcher uses (through the real KatibClient), recording every call. It stores what we
create, plays back experiment statuses on successive reads and lists the trials it is given,
all shaped like Katib v1beta1's objects; it is no cluster and runs no trials."""

from __future__ import annotations

import copy
import re
from urllib.parse import parse_qs, urlsplit

from tests.loopback import JsonRequestHandler, LoopbackServer, reply_json

API_VERSION = "kubeflow.org/v1beta1"
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
_EXPERIMENTS = re.compile(r"^/apis/kubeflow\.org/v1beta1/namespaces/([^/]+)/experiments"
                          r"(?:/([^/?]+))?")
_TRIALS = re.compile(r"^/apis/kubeflow\.org/v1beta1/namespaces/([^/]+)/trials(?:\?|$)")
# Katib's condition reasons and messages (pkg/controller.v1beta1/experiment/util/status_util.go).
_REASONS = {
    "Created": ("ExperimentCreated", "Experiment is created"),
    "Running": ("ExperimentRunning", "Experiment is running"),
    "Succeeded": ("ExperimentMaxTrialsReached",
                  "Experiment has succeeded because max trial count has reached"),
    "Failed": ("ExperimentMaxFailedTrialsReached",
               "Experiment has failed because max failed count has reached"),
}
_NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
              "code": 404}


def _metrics(metrics: dict[str, float]) -> list[dict]:
    """Katib's observation: every value a string; this stand-in reports min/max = latest."""
    return [{"name": name, "latest": str(value), "min": str(value), "max": str(value)}
            for name, value in metrics.items()]


def trial(name: str, parameters: dict[str, str], metrics: dict[str, float] | None = None,
          condition: str = "Succeeded", experiment: str = "fmnist-tune",
          namespace: str = "team-a") -> dict:
    """A Trial as Katib writes it: the assignments as strings (``trialName`` among them, as the
    experiment's trial parameters reference it), the conditions in order, the observation."""
    conditions = [{"type": "Created", "status": "True", "reason": "TrialCreated",
                   "message": "Trial is created"}]
    if condition != "Created":
        running = "True" if condition == "Running" else "False"
        conditions.append({"type": "Running", "status": running, "reason": "TrialRunning",
                           "message": "Trial is running"})
    if condition not in ("Created", "Running"):
        conditions.append({"type": condition, "status": "True", "reason": f"Trial{condition}",
                           "message": f"Trial is {condition.lower()}"})
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
          message: str = "") -> dict:
    """An Experiment status as Katib writes it; ``best`` is a :func:`trial` that becomes the
    ``currentOptimalTrial`` (Katib's placeholder, an empty one, when None)."""
    conditions = [{"type": "Created", "status": "True", "reason": _REASONS["Created"][0],
                   "message": _REASONS["Created"][1]}]
    if condition != "Created":
        conditions.append({"type": "Running", "status": "True" if condition == "Running"
                           else "False", "reason": _REASONS["Running"][0],
                           "message": _REASONS["Running"][1]})
    if condition in ("Succeeded", "Failed"):
        default_reason, default_message = _REASONS[condition]
        conditions.append({"type": condition, "status": "True",
                           "reason": reason or default_reason,
                           "message": message or default_message})
    optimal = {"bestTrialName": "", "observation": {}}
    if best is not None:
        optimal = {"bestTrialName": best["metadata"]["name"],
                   "parameterAssignments": best["spec"]["parameterAssignments"],
                   "observation": best["status"].get("observation", {})}
    return {
        "conditions": conditions, "startTime": "2025-01-01T10:00:00Z",
        "trials": succeeded + running + failed + early_stopped,
        "trialsSucceeded": succeeded, "trialsRunning": running, "trialsFailed": failed,
        "trialsEarlyStopped": early_stopped, "currentOptimalTrial": optimal,
    }


def katib_client_for(url: str, namespace: str = "team-a"):
    """The real KatibClient, talking to the stand-in at ``url``."""
    from kubeflow.katib import KatibClient
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url
    return KatibClient(client_configuration=configuration, namespace=namespace)


class KatibStandIn(LoopbackServer):
    def __init__(self, states: list[dict] | None = None, trials: list[dict] | None = None):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.experiments: dict[tuple[str, str], dict] = {}  # (namespace, name) -> what we sent
        # Statuses played back on successive reads of an experiment, the last one repeating.
        self.states = states or [state("Succeeded")]
        self.trials = trials or []
        self._reads = 0
        standin = self

        class Handler(JsonRequestHandler):
            def do_POST(self):
                body = self._body()
                standin.calls.append(("POST", self.path, body))
                match = _EXPERIMENTS.match(self.path)
                if not match or match[2]:
                    return reply_json(self, _NOT_FOUND, 404)
                key = (match[1], body["metadata"]["name"])
                if key in standin.experiments:
                    return reply_json(self, {**_NOT_FOUND, "reason": "AlreadyExists",
                                             "code": 409}, 409)
                standin.experiments[key] = body
                reply_json(self, body, 201)

            def do_GET(self):
                standin.calls.append(("GET", self.path, None))
                if (match := _EXPERIMENTS.match(self.path)) and match[2]:
                    experiment = standin.experiments.get((match[1], match[2]))
                    if experiment is None:
                        return reply_json(self, _NOT_FOUND, 404)
                    return reply_json(self, standin._with_status(experiment))
                if match := _TRIALS.match(self.path):
                    query = parse_qs(urlsplit(self.path).query)
                    selector = query.get("labelSelector", [""])[0]
                    items = [t for t in standin.trials
                             if t["metadata"]["namespace"] == match[1]
                             and _selects(selector, t["metadata"].get("labels", {}))]
                    return reply_json(self, {"apiVersion": API_VERSION, "kind": "TrialList",
                                             "metadata": {}, "items": items})
                reply_json(self, _NOT_FOUND, 404)

            def do_DELETE(self):
                standin.calls.append(("DELETE", self.path, self._body()))
                match = _EXPERIMENTS.match(self.path)
                if match and match[2] and standin.experiments.pop((match[1], match[2]), None):
                    return reply_json(self, {"kind": "Status", "apiVersion": "v1",
                                             "status": "Success"})
                reply_json(self, _NOT_FOUND, 404)

        self._serve(Handler)

    def _with_status(self, experiment: dict) -> dict:
        status = self.states[min(self._reads, len(self.states) - 1)]
        self._reads += 1
        return {**copy.deepcopy(experiment), "status": status}

    def add_experiment(self, name: str, namespace: str = "team-a", **spec) -> None:
        """An Experiment already on the cluster (created by an earlier try of the step)."""
        self.experiments[(namespace, name)] = {
            "apiVersion": API_VERSION, "kind": "Experiment",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }

    def katib_client(self, namespace: str = "team-a"):
        return katib_client_for(self.url, namespace)

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path.split("?")[0]) for method, path, _ in self.calls]

    def posts(self) -> list[dict]:
        return [body for method, _, body in self.calls if method == "POST"]


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (``a=b,c=d``), what the SDK sends."""
    pairs = [term.split("=", 1) for term in selector.split(",") if term]
    return all(labels.get(key) == value for key, value in pairs)
