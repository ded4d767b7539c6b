"""A stand-in for the Kubernetes API server with the training operator installed: the TFJob,
pod and pod-log endpoints the TFJob launcher uses, recording every call. It is no cluster; each
rule it enforces cites the upstream file and tag it comes from:

* admission, in the API server's order: a version the CRD does not serve is 404
  (kubernetes/apiextensions-apiserver v0.31.3 pkg/apiserver/customresource_handler.go lines
  278-279, delegating to a NotFound handler, apiserver.go 170-172); a body apiVersion that is
  not the path's is 400 (kubernetes/apiserver v0.31.3 pkg/endpoints/handlers/create.go
  142-146); a name that is no DNS-1123 subdomain, or a wrong kind, is 422 Invalid
  (apiextensions-apiserver v0.31.3 pkg/registry/customresource/validator.go line 53 and
  pkg/registry/customresource/validator.go 111-122, run by the strategy before admission
  webhooks: pkg/registry/generic/registry/store.go 482-488); then the training operator's
  validating webhook (kubeflow/trainer v1.9.2 pkg/webhooks/tensorflow/tfjob_webhook.go 73-125)
  answers 403 (controller-runtime v0.19.1 pkg/webhook/admission/response.go 63-75; message
  format from kubernetes/apiserver v0.31.3 pkg/admission/plugin/webhook/errors/statuserror.go
  29-47); a second create of the same name is 409 AlreadyExists;
* a stored TFJob is returned as submitted (defaults are applied in the controller's memory
  only: tensorflow_defaults.go, tfjob_controller.go line 151) with the status the controller
  last wrote: the controller (tests/standins/tfjob_operator.py) reconciles after each read, so
  status lags every write by one read, and conditions are cumulative (pkg/util/status.go);
* pods carry the operator's labels and are listed by label selector (equality and
  inequality terms: kubernetes/apimachinery v0.31.3 pkg/labels/selector.go);
* faults can be injected into any later request: an HTTP status (5xx, 404, 429), a timeout (the
  reply is held until the client has given up), or a dropped connection.
"""

from __future__ import annotations

import copy
import itertools
import re
import tempfile
import threading
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.standins.loopback import LoopbackServer, recording_handler, reply_json
from tests.standins.tfjob_operator import CONTAINER, Kubelet, TFJobController

GROUP = "kubeflow.org"
SERVED_VERSION = "v1"
_TFJOBS = re.compile(r"^/apis/kubeflow\.org/([^/]+)/namespaces/([^/]+)/tfjobs(?:/([^/?]+))?")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/?]+))?(/log)?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # apimachinery validation.go line 225
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")  # webhooks.go
TFJOB_WEBHOOK = "validator.tfjob.training-operator.kubeflow.org"
HOLD_SECONDS = 30  # the longest a held request (a timeout, a gated create) waits


def status_body(code: int, reason: str, message: str = "", **details) -> dict:
    """A ``metav1.Status`` as the API server writes it for an error."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code, **details}


# metav1.StatusReason by code (kubernetes/apimachinery v0.31.3 pkg/apis/meta/v1/types.go lines
# 833-964; 410 is Expired, a resourceVersion too old: pkg/api/errors/errors.go lines 270-279).
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           408: "Timeout", 409: "AlreadyExists", 410: "Expired", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (apimachinery v0.31.3 pkg/labels/selector.go):
    ``k=v``, ``k==v``, ``k!=v`` and a bare ``k`` (exists), comma-separated, all must hold."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class Gate:
    """Holds matching requests until :meth:`release` (or ``HOLD_SECONDS``): ``arrived`` is set
    once one is being held."""

    def __init__(self):
        self.arrived = threading.Event()
        self._released = threading.Event()

    def hold(self) -> None:
        self.arrived.set()
        self._released.wait(HOLD_SECONDS)

    def release(self) -> None:
        self._released.set()


class FaultyServer(LoopbackServer):
    """Records calls, injects faults and gates requests; the stand-ins extend it."""

    def _init_faults(self) -> None:
        self.calls: list[tuple[str, str, dict | None]] = []
        self._faults: dict[tuple[str, str], deque] = {}
        self._gates: dict[tuple[str, str], Gate] = {}
        self._held = threading.Event()  # released when the server stops
        # How long a "timeout" fault holds its request: past the client's request timeout, and
        # short, so the held request does not occupy the client's thread pool for long.
        self.timeout_hold_seconds = 1.0
        self.lock = threading.RLock()

    def inject(self, method: str, resource: str, *faults) -> None:
        """The next requests of ``method`` on ``resource`` (``tfjobs``, ``pods``, ``log``,
        ``experiments``, ``trials``) get ``faults`` in order: an HTTP status code,
        ``"timeout"`` (held ``timeout_hold_seconds``, then closed without an answer), or
        ``"reset"`` (closed at once without an answer)."""
        self._faults.setdefault((method, resource), deque()).extend(faults)

    def gate(self, method: str, resource: str) -> Gate:
        """The next ``method`` request on ``resource`` is held at the :class:`Gate`."""
        gate = Gate()
        self._gates[(method, resource)] = gate
        return gate

    def _fault(self, handler, method: str, resource: str) -> bool:
        """Applies an injected fault; True when the request was answered by it."""
        gate = self._gates.pop((method, resource), None)
        if gate is not None:
            gate.hold()
        queue = self._faults.get((method, resource))
        if not queue:
            return False
        fault = queue.popleft()
        if fault == "timeout":
            self._held.wait(self.timeout_hold_seconds)
            handler.close_connection = True
            return True
        if fault == "reset":
            handler.close_connection = True
            return True
        reply_json(handler, status_body(fault, REASONS.get(fault, "Unknown"),
                                        f"injected HTTP {fault}"), fault)
        return True

    def _serve(self, handler_class) -> None:
        super()._serve(handler_class)
        # serve_forever's default 0.5 s poll would make every test's shutdown wait that long.
        self.thread = threading.Thread(
            target=lambda: self.server.serve_forever(poll_interval=0.01), daemon=True)

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path.split("?")[0]) for method, path, _ in self.calls]

    def posts(self) -> list[dict]:
        return [body for method, _, body in self.calls if method == "POST"]

    def __exit__(self, *exc):
        self._held.set()
        for gate in self._gates.values():
            gate.release()
        return super().__exit__(*exc)


class Clock:
    """The stand-ins' time: one second per tick, as RFC 3339 strings."""

    def __init__(self):
        self.ticks = itertools.count()

    def __call__(self) -> str:
        moment = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=next(self.ticks))
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def tfjob_webhook_problems(body: dict) -> list[str]:
    """kubeflow/trainer v1.9.2 pkg/webhooks/tensorflow/tfjob_webhook.go validateTFJob (lines
    73-125) and pkg/common/util/webhooks.go ValidateRunPolicy: exactly these rules; unknown
    replica types, replica counts and restartPolicy strings are not checked there."""
    problems = []
    name = (body.get("metadata") or {}).get("name", "")
    if len(name) > 63 or not _DNS_1035.fullmatch(name):
        problems.append(f'metadata.name: Invalid value: "{name}": should match: a DNS-1035 '
                        "label must consist of lower case alphanumeric characters or '-', "
                        "start with an alphabetic character, and end with an alphanumeric "
                        "character (regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
    spec = body.get("spec") or {}
    managed_by = (spec.get("runPolicy") or {}).get("managedBy")
    if managed_by is not None and managed_by not in _MANAGED_BY:
        problems.append(f'spec.runPolicy.managedBy: Unsupported value: "{managed_by}"')
    replicas = spec.get("tfReplicaSpecs")
    if replicas is None:
        return problems + ["spec.tfReplicaSpecs: Required value: must be required"]
    chiefs = 0
    for rtype, replica in replicas.items():
        path = f"spec.tfReplicaSpecs[{rtype}].template.spec.containers"
        containers = ((replica or {}).get("template") or {}).get("spec", {}).get("containers")
        if not containers:
            problems.append(f"{path}: Required value: must be specified")
            continue
        chiefs += rtype in ("Chief", "Master")
        for i, container in enumerate(containers):
            if not container.get("image"):
                problems.append(f"{path}[{i}].image: Required value: must be required")
        if not any(c.get("name") == CONTAINER for c in containers):
            problems.append(f"{path}: Required value: must have at least one container with "
                            f"name {CONTAINER}")
    if chiefs > 1:
        problems.append("spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or "
                        "Master role")
    return problems


def admission(handler, body: dict, version: str, *, group: str, served: str, kind: str,
              plural: str, webhook: str, webhook_code: int, problems) -> bool:
    """The API server's create path for a custom resource up to storage; True when it
    answered (refused the request). See the module docstring for the order and citations."""
    if version != served:
        reply_json(handler, status_body(404, "NotFound", "the server could not find the "
                                        "requested resource"), 404)
        return True
    expected = f"{group}/{served}"
    if body.get("apiVersion") != expected:
        reply_json(handler, status_body(400, "BadRequest", f"the API version in the data "
                                        f"({body.get('apiVersion')}) does not match the "
                                        f"expected API version ({expected})"), 400)
        return True
    name = (body.get("metadata") or {}).get("name", "")
    # apiextensions-apiserver v0.31.3 pkg/registry/customresource/validator.go line 53: the
    # name of any custom resource is a DNS-1123 subdomain (apimachinery validation.go).
    if len(name) > 253 or not _DNS_1123_SUBDOMAIN.fullmatch(name):
        reply_json(handler, status_body(
            422, "Invalid", f'{kind}.{group} "{name}" is invalid: metadata.name: Invalid value: '
            f'"{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
            "characters, '-' or '.', and must start and end with an alphanumeric character"),
            422)
        return True
    if body.get("kind") != kind:
        reply_json(handler, status_body(
            422, "Invalid", f'{kind}.{group} "{name}" is invalid: kind: Invalid value: '
            f'"{body.get("kind")}": must be {kind}',
            details={"name": name, "group": group, "kind": kind}), 422)
        return True
    found = problems(body)
    if found:
        joined = found[0] if len(found) == 1 else "[" + ", ".join(found) + "]"
        reply_json(handler, status_body(
            webhook_code, REASONS[webhook_code],
            f'admission webhook "{webhook}" denied the request: {joined}'), webhook_code)
        return True
    return False


class KubernetesStandIn(FaultyServer):
    """TFJobs run by :class:`~tests.standins.tfjob_operator.TFJobController`. ``scripts``
    (replica name -> exit codes of successive incarnations) and ``run_processes`` apply to every
    job created here; ``running_ticks`` is how many reads a scripted pod keeps running."""

    def __init__(self, *, scripts: dict | None = None, run_processes: bool = False,
                 running_ticks: int = 2, work_dir: Path | None = None,
                 logs: dict[str, str] | None = None):
        self._init_faults()
        self.scripts = scripts or {}
        self.run_processes = run_processes
        self.logs = logs or {}  # replica name -> the log text of a scripted pod
        self._tmp = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="k8s-standin-")
            work_dir = Path(self._tmp.name)
        self.kubelet = Kubelet(work_dir, running_ticks=running_ticks)
        self.clock = Clock()
        self.jobs: dict[tuple[str, str], TFJobController] = {}
        self.deleted: dict[tuple[str, str], dict] = {}  # the last state of each deleted job
        self._serve(recording_handler(self))

    # -- requests ---------------------------------------------------------------------------

    def on_post(self, handler, body: dict) -> None:
        match = _TFJOBS.match(handler.path)
        if not match or match[3]:
            return reply_json(handler, status_body(404, "NotFound"), 404)
        if self._fault(handler, "POST", "tfjobs"):
            return None
        version, namespace = match[1], match[2]
        if admission(handler, body, version, group=GROUP, served=SERVED_VERSION, kind="TFJob",
                     plural="tfjobs", webhook=TFJOB_WEBHOOK, webhook_code=403,
                     problems=tfjob_webhook_problems):
            return None
        name = body["metadata"]["name"]
        with self.lock:
            if (namespace, name) in self.jobs:
                return reply_json(handler, status_body(
                    409, "AlreadyExists", f'tfjobs.kubeflow.org "{name}" already exists'), 409)
            stored = copy.deepcopy(body)
            stored["metadata"].update(namespace=namespace, uid=f"uid-{name}",
                                      creationTimestamp=self.clock())
            self.jobs[(namespace, name)] = self.controller_for(stored)
        reply_json(handler, stored, 201)
        return None

    def controller_for(self, job: dict) -> TFJobController:
        return TFJobController(job, self.kubelet, self.clock, scripts=self.scripts,
                               run_processes=self.run_processes)

    def read_then_reconcile(self, handler, controllers: dict, key: tuple, what: str,
                            before_tick=None) -> None:
        """A GET of a job: its manifest as it is, then its controllers act once (status lags
        the read). One request at a time, however many clients poll at once: the operators
        reconcile from client-go's work queue, which never hands one key to two workers at once
        ("Stingy", kubernetes/client-go v0.33.9 ``util/workqueue/queue.go``, the ``Type`` doc)."""
        with self.lock:
            controller = controllers.get(key)
            if controller is None:
                return reply_json(handler, status_body(404, "NotFound", f"{what} not found"),
                                  404)
            reply_json(handler, controller.manifest())
            if before_tick is not None:
                before_tick(controller)
            controller.tick()
        return None

    def on_get(self, handler) -> None:
        path = urlsplit(handler.path).path
        if match := _TFJOBS.match(path):
            if self._fault(handler, "GET", "tfjobs"):
                return None
            if match[1] != SERVED_VERSION:
                return reply_json(handler, status_body(404, "NotFound"), 404)
            return self.read_then_reconcile(handler, self.jobs, (match[2], match[3]),
                                            f'tfjobs.kubeflow.org "{match[3]}"')
        if (match := _PODS.match(path)) and match[3]:
            if self._fault(handler, "GET", "log"):
                return None
            pod = self._pod(match[1], match[2])
            if pod is None:
                return reply_json(handler, status_body(404, "NotFound"), 404)
            data = (pod.log() or self.logs.get(f"{pod.rtype.lower()}-{pod.index}", "")).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "text/plain")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return None
        if match := _PODS.match(path):
            if self._fault(handler, "GET", "pods"):
                return None
            selector = parse_qs(urlsplit(handler.path).query).get("labelSelector", [""])[0]
            items = [pod.manifest() for pod in self.pods(match[1])
                     if selects(selector, pod.labels)]
            return reply_json(handler, {"kind": "PodList", "apiVersion": "v1",
                                        "metadata": {}, "items": items})
        return reply_json(handler, status_body(404, "NotFound"), 404)

    def on_delete(self, handler) -> None:
        match = _TFJOBS.match(handler.path)
        if not match or not match[3]:
            return reply_json(handler, status_body(404, "NotFound"), 404)
        if self._fault(handler, "DELETE", "tfjobs"):
            return None
        with self.lock:
            controller = self.jobs.pop((match[2], match[3]), None)
        if controller is None:
            return reply_json(handler, status_body(
                404, "NotFound", f'tfjobs.kubeflow.org "{match[3]}" not found'), 404)
        self.deleted[(match[2], match[3])] = controller.manifest()
        controller.delete()
        return reply_json(handler, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    # -- state ------------------------------------------------------------------------------

    def pods(self, namespace: str):
        for (ns, _), controller in list(self.jobs.items()):
            if ns == namespace:
                yield from list(controller.pods.values())

    def _pod(self, namespace: str, name: str):
        return next((p for p in self.pods(namespace) if p.name == name), None)

    def job(self, name: str, namespace: str = "kubeflow") -> dict | None:
        """The job as stored now, or as it was when it was deleted."""
        controller = self.jobs.get((namespace, name))
        return controller.manifest() if controller else self.deleted.get((namespace, name))

    def delete_behind_our_back(self, name: str, namespace: str = "kubeflow") -> None:
        """Someone else deletes the job (kubectl delete, a TTL, a namespace going away)."""
        self.jobs.pop((namespace, name)).delete()

    def add_job(self, body: dict) -> None:
        """A TFJob already on the cluster (created by an earlier try of the step)."""
        stored = copy.deepcopy(body)
        self.jobs[(stored["metadata"]["namespace"], stored["metadata"]["name"])] = \
            self.controller_for(stored)

    def training_client(self, namespace: str = "kubeflow"):
        from kubeflow.training import TrainingClient
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.retries = 0  # our runner retries; urllib3's silent ones would hide it
        return TrainingClient(client_configuration=configuration, namespace=namespace,
                              job_kind="TFJob")

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        for controller in list(self.jobs.values()):
            controller.delete()
        self.kubelet.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        return result



class FakeTime:
    """A monotonic clock and a sleep that advances it: the launchers' poll loops run without
    waiting, and their deadlines (in fake seconds) bound every test."""

    def __init__(self):
        self.now = 0.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
