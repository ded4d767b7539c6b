"""A stand-in for a cluster with Kueue managing ``batch/v1`` Jobs, for the one test of a batch
prediction Job in a Kueue queue (tests/fmnist_kfp/batch/test_batch_kubernetes.py) until Kueue
runs on the local cluster (every other batch Job test runs on the real API server and Job
controller, tests/cluster.py). It serves the Job endpoints the runner uses, records every
call, and "runs" an Indexed Job's pods as local processes of their container command
(``python`` replaced by this interpreter), each with its ``JOB_COMPLETION_INDEX``, on paths that
stand for the shared volume.

Rules, each from upstream:

* A Job labelled ``kueue.x-k8s.io/queue-name`` is created suspended by Kueue's webhook (kueue
  v0.19.2 pkg/controller/jobs/job/job_controller.go lines 157-166) and unsuspended on
  admission, here after ``queued_reads`` reads.
* An Indexed Job's pods get ``JOB_COMPLETION_INDEX`` (kubernetes/kubernetes
  ``pkg/controller/job/indexed_job_utils.go``, ``addCompletionIndexEnvVariable``); the Job is
  finished when its ``Complete`` or ``Failed`` condition is true (``batch/v1/types.go:602-615``).
* Creating an object whose name exists is HTTP 409 ``AlreadyExists``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from urllib.parse import urlparse

from tests.standins.loopback import JsonRequestHandler, LoopbackServer, faulted, reply_json

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?(/status)?$")


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


class JobStandIn(LoopbackServer):
    """Jobs as Kueue and the Job controller would handle them (module docstring); a Job of
    no queue runs at once."""

    def __init__(self, queued_reads: int = 0):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.jobs: dict[tuple[str, str], dict] = {}
        self.queued_reads = queued_reads
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
                    reply_json(self, {k: v for k, v in job.items() if k != "queued_reads_left"})
                    return standin._admit_after(job)
                reply_json(self, _status(404, "NotFound", path), 404)

        self._serve(Handler)

    def _create_job(self, handler, namespace: str, body: dict) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.jobs:
            return reply_json(handler, _status(409, "AlreadyExists",
                                               f'jobs.batch "{key[1]}" already exists'), 409)
        job = {**body, "status": {"active": 0, "succeeded": 0, "failed": 0}}
        job["metadata"] = {**job["metadata"], "uid": f"uid-{key[1]}"}
        self.jobs[key] = job
        if self.queued_reads and (body["metadata"].get("labels") or {}).get(
                "kueue.x-k8s.io/queue-name"):
            job["spec"] = {**job["spec"], "suspend": True}
            job["queued_reads_left"] = self.queued_reads
        else:
            threading.Thread(target=self._run_pods, args=(job,), daemon=True).start()
        reply_json(handler, job, 201)

    def _admit_after(self, job: dict) -> None:
        if "queued_reads_left" not in job:
            return
        job["queued_reads_left"] -= 1
        if job["queued_reads_left"] <= 0:
            del job["queued_reads_left"]
            job["spec"]["suspend"] = False  # admitted: the Job controller creates the pods
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

    def batch_api(self):
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.BatchV1Api(client.ApiClient(configuration))
