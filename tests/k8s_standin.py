"""A stand-in for the Kubernetes API server: just the TFJob and pod endpoints the launcher
uses, recording every call. It checks what we send and plays back job states; it is no cluster."""

from __future__ import annotations

import re

from tests.loopback import JsonRequestHandler, LoopbackServer, reply_json

_TFJOB = re.compile(r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/tfjobs(?:/([^/?]+))?")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods")
_LOG = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log")


class KubernetesStandIn(LoopbackServer):
    def __init__(self, states: list[dict] | None = None):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.jobs: dict[str, dict] = {}
        # Conditions played back on successive reads of a job, the last one repeating.
        self.states = states or [{"type": "Succeeded", "reason": "TFJobSucceeded",
                                  "message": "TFJob succeeded"}]
        self._reads = 0
        self.pod_log = ""  # what the chief pod's log holds, when there is a pod
        standin = self

        class Handler(JsonRequestHandler):
            def _reply(self, code: int, body: dict) -> None:
                reply_json(self, body, code)

            def do_POST(self):
                body = self._body()
                standin.calls.append(("POST", self.path, body))
                if _TFJOB.match(self.path):
                    standin.jobs[body["metadata"]["name"]] = body
                    return self._reply(201, body)
                self._reply(404, {"kind": "Status", "code": 404})

            def do_GET(self):
                standin.calls.append(("GET", self.path, None))
                if (match := _TFJOB.match(self.path)) and match[2]:
                    job = standin.jobs.get(match[2])
                    if job is None:
                        return self._reply(404, {"kind": "Status", "code": 404,
                                                 "reason": "NotFound"})
                    return self._reply(200, standin._with_status(job))
                if match := _LOG.match(self.path):
                    data = standin.pod_log.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                if _PODS.match(self.path):
                    items = [
                        {"metadata": {"name": f"{name}-worker-0", "namespace": "kubeflow"},
                         "status": {"phase": "Running"}}
                        for name in standin.jobs
                    ] if standin.pod_log else []
                    return self._reply(200, {"kind": "PodList", "apiVersion": "v1",
                                             "items": items})
                self._reply(404, {"kind": "Status", "code": 404})

            def do_DELETE(self):
                standin.calls.append(("DELETE", self.path, None))
                if (match := _TFJOB.match(self.path)) and match[2] in standin.jobs:
                    standin.jobs.pop(match[2])
                    return self._reply(200, {"kind": "Status", "status": "Success"})
                self._reply(404, {"kind": "Status", "code": 404})

        self._serve(Handler)

    def _with_status(self, job: dict) -> dict:
        state = self.states[min(self._reads, len(self.states) - 1)]
        self._reads += 1
        condition = {"type": state["type"], "status": "True", "reason": state.get("reason", ""),
                     "message": state.get("message", "")}
        return {**job, "status": {"conditions": [condition]}}

    def training_client(self, namespace: str = "kubeflow"):
        from kubeflow.training import TrainingClient
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return TrainingClient(client_configuration=configuration, namespace=namespace,
                              job_kind="TFJob")

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path.split("?")[0]) for method, path, _ in self.calls]
