"""A stand-in for the Kubernetes API server: the ``batch/v1`` Job endpoints batch prediction
uses and the ``Tensorboard`` endpoints the training step uses. It is no cluster: it enforces
only the rules cited below, records every call, and "runs" an Indexed Job's pods as local
processes of their container command (``python`` replaced by this interpreter), each with its
``JOB_COMPLETION_INDEX``, on paths that stand for the shared volume.

Rules, each from upstream:

* Job ``spec.template.spec.restartPolicy`` must be ``Never`` or ``OnFailure``: kubernetes/kubernetes
  ``pkg/apis/batch/validation/validation.go`` (``validateJobSpec``); k8s.io/api v0.36.3
  ``batch/v1/types.go:401``.
* ``completionMode: Indexed`` needs ``spec.completions``, and ``parallelism`` at most 10^5:
  k8s.io/api v0.36.3 ``batch/v1/types.go:415-438``.
* ``backoffLimitPerIndex`` only with ``Indexed`` and ``restartPolicy: Never``:
  ``batch/v1/types.go:356-363``.
* A Job's name is a DNS-1123 subdomain (``ValidateJob`` → ``ValidateObjectMeta`` with
  ``ValidateReplicationControllerName``, validation.go).
* An Indexed Job's pods get ``JOB_COMPLETION_INDEX`` (kubernetes/kubernetes
  ``pkg/controller/job/indexed_job_utils.go``, ``addCompletionIndexEnvVariable``); the Job is
  finished when its ``Complete`` or ``Failed`` condition is true (``batch/v1/types.go:602-615``).
* Creating an object whose name exists is HTTP 409 ``AlreadyExists`` (apiserver's create
  handler; the runner's re-attach relies on it, see ``tests/fmnist_kfp/kubernetes/test_runner.py``).
* A ``Tensorboard`` must satisfy its CRD's schema (``tests/crds/``, kubeflow/kubeflow v1.10.0):
  ``spec.logspath`` is required.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from urllib.parse import parse_qs, urlparse

from fmnist_kfp.settings.names import is_dns_1123_subdomain
from tests.standins.loopback import JsonRequestHandler, LoopbackServer, faulted, reply_json

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?(/status)?$")
_TENSORBOARDS = re.compile(
    r"^/apis/tensorboard\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/tensorboards(?:/([^/]+))?$")


def job_problems(job: dict) -> list[str]:
    """What the API server would refuse in this Job (the rules in the module docstring)."""
    problems = []
    name = (job.get("metadata") or {}).get("name", "")
    if not is_dns_1123_subdomain(name):
        problems.append(f"metadata.name: Invalid value: {name!r}")
    spec = job.get("spec") or {}
    pod = ((spec.get("template") or {}).get("spec") or {})
    restart = pod.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        problems.append(f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": '
                        'supported values: "OnFailure", "Never"')
    indexed = spec.get("completionMode") == "Indexed"
    if indexed and spec.get("completions") is None:
        problems.append("spec.completions: Required value: when completion mode is Indexed")
    if indexed and (spec.get("parallelism") or 0) > 100_000:
        problems.append("spec.parallelism: Invalid value: must be less than or equal to 100000")
    if spec.get("backoffLimitPerIndex") is not None and (not indexed or restart != "Never"):
        problems.append("spec.backoffLimitPerIndex: requires Indexed and restartPolicy Never")
    return problems


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


class JobStandIn(LoopbackServer):
    """``run_pods``: run each Indexed Job's pods as local processes (else the Job stays as
    ``states`` says: a list of conditions played back on successive reads)."""

    def __init__(self, run_pods: bool = True, states: list[dict] | None = None,
                 tensorboard_schema: dict | None = None, queued_reads: int = 0):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.jobs: dict[tuple[str, str], dict] = {}
        self.tensorboards: dict[tuple[str, str], dict] = {}
        self.pod_env: list[dict[str, str]] = []
        self.run_pods = run_pods
        self.states = states or []
        self.tensorboard_schema = tensorboard_schema
        # Kueue: a Job labelled kueue.x-k8s.io/queue-name is created suspended by its webhook
        # (kueue v0.19.2 pkg/controller/jobs/job/job_controller.go lines 157-166) and
        # unsuspended on admission, here after this many reads.
        self.queued_reads = queued_reads
        self._reads = 0
        self._lock = threading.Lock()
        standin = self

        class Handler(JsonRequestHandler):
            def do_POST(self):
                if faulted(self, "POST"):
                    return None
                body = self._body()
                path = urlparse(self.path).path
                standin.calls.append(("POST", self.path, body))
                if (match := _JOBS.match(path)) and not match[2]:
                    return standin._create_job(self, match[1], body)
                if (match := _TENSORBOARDS.match(path)) and not match[2]:
                    return standin._create_tensorboard(self, match[1], body)
                reply_json(self, _status(404, "NotFound", path), 404)

            def do_GET(self):
                if faulted(self, "GET"):
                    return None
                path = urlparse(self.path).path
                standin.calls.append(("GET", self.path, None))
                if (match := _JOBS.match(path)) and match[2]:
                    job = standin.jobs.get((match[1], match[2]))
                    if job is None:
                        return reply_json(self, _status(404, "NotFound", match[2]), 404)
                    reply_json(self, standin._with_status(job))
                    return standin._admit_after(job)
                if (match := _TENSORBOARDS.match(path)) and match[2]:
                    board = standin.tensorboards.get((match[1], match[2]))
                    if board is None:
                        return reply_json(self, _status(404, "NotFound", match[2]), 404)
                    return reply_json(self, board)
                reply_json(self, _status(404, "NotFound", path), 404)

            def do_DELETE(self):
                if faulted(self, "DELETE"):
                    return None
                parsed = urlparse(self.path)
                body = self._body()
                standin.calls.append(("DELETE", self.path, body))
                match = _JOBS.match(parsed.path)
                if match and (match[1], match[2]) in standin.jobs:
                    standin.jobs.pop((match[1], match[2]))
                    policy = parse_qs(parsed.query).get("propagationPolicy", [None])[0] or (
                        (body or {}).get("propagationPolicy"))
                    return reply_json(self, {"kind": "Status", "status": "Success",
                                             "details": {"propagationPolicy": policy}})
                reply_json(self, _status(404, "NotFound", parsed.path), 404)

        self._serve(Handler)

    # Jobs

    def _create_job(self, handler, namespace: str, body: dict) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.jobs:
            return reply_json(handler, _status(409, "AlreadyExists",
                                               f'jobs.batch "{key[1]}" already exists'), 409)
        problems = job_problems(body)
        if problems:
            return reply_json(handler, _status(
                422, "Invalid", f'Job.batch "{key[1]}" is invalid: ' + "; ".join(problems)), 422)
        job = {**body, "status": {"active": 0, "succeeded": 0, "failed": 0}}
        job["metadata"] = {**job["metadata"], "uid": f"uid-{key[1]}"}
        self.jobs[key] = job
        if self.queued_reads and (body["metadata"].get("labels") or {}).get(
                "kueue.x-k8s.io/queue-name"):
            job["spec"] = {**job["spec"], "suspend": True}
            job["queued_reads_left"] = self.queued_reads
        elif self.run_pods:
            threading.Thread(target=self._run_pods, args=(job,), daemon=True).start()
        reply_json(handler, job, 201)

    def _admit_after(self, job: dict) -> None:
        if "queued_reads_left" not in job:
            return
        job["queued_reads_left"] -= 1
        if job["queued_reads_left"] <= 0:
            del job["queued_reads_left"]
            job["spec"]["suspend"] = False  # admitted: the Job controller creates the pods
            if self.run_pods:
                threading.Thread(target=self._run_pods, args=(job,), daemon=True).start()

    def _run_pods(self, job: dict) -> None:
        """Every index's pod, in parallel: the container command with the pod's env."""
        spec = job["spec"]
        [container] = spec["template"]["spec"]["containers"]
        command = [sys.executable if part == "python" else part for part in container["command"]]
        processes = []
        for index in range(spec["completions"]):
            env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])},
                   "JOB_COMPLETION_INDEX": str(index)}
            with self._lock:
                self.pod_env.append({"JOB_COMPLETION_INDEX": str(index)})
            processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, text=True))
        job["status"]["active"] = len(processes)
        failed = 0
        for process in processes:
            _, errors = process.communicate(timeout=600)
            job["status"]["active"] -= 1
            if process.returncode == 0:
                job["status"]["succeeded"] += 1
            else:
                failed += 1
                job["status"]["failed"] += 1
                job["status"]["last_error"] = errors[-2000:]
        condition = ({"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                      "message": "Job has reached the specified backoff limit"} if failed
                     else {"type": "Complete", "status": "True"})
        job["status"]["conditions"] = [condition]

    def _with_status(self, job: dict) -> dict:
        if self.run_pods or not self.states:
            return {k: v for k, v in job.items() if k != "queued_reads_left"}
        state = self.states[min(self._reads, len(self.states) - 1)]
        self._reads += 1
        return {**job, "status": {**job["status"], "conditions": [
            {"status": "True", **state}]}}

    # Tensorboards

    def _create_tensorboard(self, handler, namespace: str, body: dict) -> None:
        import jsonschema

        key = (namespace, body["metadata"]["name"])
        if key in self.tensorboards:
            return reply_json(handler, _status(
                409, "AlreadyExists",
                f'tensorboards.tensorboard.kubeflow.org "{key[1]}" already exists'), 409)
        if self.tensorboard_schema is not None:
            try:
                jsonschema.validate(body, self.tensorboard_schema)
            except jsonschema.ValidationError as error:
                return reply_json(handler, _status(422, "Invalid", error.message), 422)
        self.tensorboards[key] = body
        reply_json(handler, body, 201)

    # Clients

    def configuration(self):
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return configuration

    def batch_api(self):
        from kubernetes import client

        return client.BatchV1Api(client.ApiClient(self.configuration()))

    def custom_api(self):
        from kubernetes import client

        return client.CustomObjectsApi(client.ApiClient(self.configuration()))

    def methods(self) -> list[tuple[str, str]]:
        return [(method, urlparse(path).path) for method, path, _ in self.calls]
