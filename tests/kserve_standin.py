"""A stand-in for the Kubernetes API server with KServe installed: the InferenceService and
ServingRuntime endpoints the rollout uses, recording every call, and a toy controller.

The API side behaves as the API server does for custom resources with a status subresource:
POST answers 409 when the object exists, GET 404 with a ``NotFound`` Status when it does not,
PUT needs the current ``metadata.resourceVersion`` (409 when stale), ``metadata.generation``
grows when the spec changes, and status written by the controller bumps the resourceVersion.

The controller side plays KServe Serverless: a change of the predictor (other than
``canaryTrafficPercent``) or of the annotations creates a revision; once it is ready
``canaryTrafficPercent`` splits traffic between it (tag ``latest``) and the last rolled-out
revision (tag ``prev``), and without the field the latest revision is rolled out to 100%.
``ready_for(isvc)`` decides whether a written object's latest revision becomes ready (a
revision that does not leaves the traffic as it was and Ready False). It is no cluster.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.loopback import JsonRequestHandler, LoopbackServer, reply_json

ISVC_CRD = ("inferenceservice.serving.kserve.io_v1beta1.yaml", "v1beta1")
RUNTIME_CRD = ("servingruntime.serving.kserve.io_v1alpha1.yaml", "v1alpha1")

_ISVC = re.compile(
    r"^/apis/serving\.kserve\.io/v1beta1/namespaces/([^/]+)/inferenceservices(?:/([^/?]+))?/?(?:\?|$)"
)
_RUNTIME = re.compile(
    r"^/apis/serving\.kserve\.io/v1alpha1/namespaces/([^/]+)/servingruntimes(?:/([^/?]+))?/?(?:\?|$)"
)


def _status(code: int, reason: str, message: str, name: str = "", kind: str = "") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
            "details": {"name": name, "group": "serving.kserve.io", "kind": kind}}


@dataclass
class _Controller:
    """What the toy controller remembers about one InferenceService."""

    template: str = ""
    revisions: int = 0
    latest_created: str = ""
    latest_ready: str = ""
    latest_rolled_out: str = ""
    previous_rolled_out: str = ""


class KServeStandIn(LoopbackServer):
    def __init__(self, url_template: str = "http://{host}.{namespace}.example.com",
                 kserve_installed: bool = True, tag_routing: bool = True):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.isvcs: dict[tuple[str, str], dict] = {}
        self.runtimes: dict[tuple[str, str], dict] = {}
        self.controllers: dict[tuple[str, str], _Controller] = {}
        # ``url_template.format(host=..., namespace=...)``: a fixed URL (no fields) points every
        # address at one local server.
        self.url_template = url_template
        self.kserve_installed = kserve_installed
        self.tag_routing = tag_routing  # False: traffic entries carry no tag or url
        self.ready_for = lambda isvc: True  # whether a write's latest revision becomes ready
        self.conflicts = 0  # the next this many PUTs of an InferenceService answer 409
        self._version = 100
        self._lock = threading.Lock()
        self._kubeconfig_dir: tempfile.TemporaryDirectory | None = None
        self._serve(self._handler())

    # -- the HTTP side ---------------------------------------------------------------------

    def _handler(self):
        standin = self

        class Handler(JsonRequestHandler):
            def _route(self, method: str, body=None):
                standin.calls.append((method, self.path, copy.deepcopy(body)))
                with standin._lock:
                    code, reply = standin._dispatch(method, self.path, body)
                if reply is None:  # what the API server says for a resource it does not serve
                    data = b"404 page not found\n"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                reply_json(self, reply, code)

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST", self._body())

            def do_PUT(self):
                self._route("PUT", self._body())

            def do_DELETE(self):
                self._route("DELETE")

        return Handler

    def _dispatch(self, method: str, path: str, body) -> tuple[int, dict | None]:
        if self.kserve_installed and (match := _ISVC.match(path)):
            return self._isvc(method, match[1], match[2], body)
        if self.kserve_installed and (match := _RUNTIME.match(path)):
            return self._runtime(method, match[1], match[2], body)
        return 404, None

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _isvc(self, method, namespace, name, body):
        key = (namespace, name)
        if method == "GET" and name is None:
            items = [obj for (ns, _), obj in self.isvcs.items() if ns == namespace]
            return 200, {"apiVersion": "serving.kserve.io/v1beta1",
                         "kind": "InferenceServiceList", "items": items}
        if method == "POST":
            name = ((body or {}).get("metadata") or {}).get("name", "")
            key = (namespace, name)
            if key in self.isvcs:
                return 409, _status(409, "AlreadyExists", f'inferenceservices.serving.kserve.io '
                                    f'"{name}" already exists', name, "inferenceservices")
            return 201, self._store(key, body, None)
        existing = self.isvcs.get(key)
        if existing is None:
            return 404, _status(404, "NotFound", f'inferenceservices.serving.kserve.io "{name}" '
                                "not found", name, "inferenceservices")
        if method == "GET":
            return 200, copy.deepcopy(existing)
        if method == "DELETE":
            del self.isvcs[key]
            self.controllers.pop(key, None)
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if method == "PUT":
            version = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if not version:
                return 422, _status(422, "Invalid", "metadata.resourceVersion: Invalid value: "
                                    "0x0: must be specified for an update", name,
                                    "InferenceService")
            if self.conflicts > 0 or version != existing["metadata"]["resourceVersion"]:
                self.conflicts = max(0, self.conflicts - 1)
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on '
                                    f'inferenceservices.serving.kserve.io "{name}": the object '
                                    "has been modified; please apply your changes to the latest "
                                    "version and try again", name, "inferenceservices")
            return 200, self._store(key, body, existing)
        return 405, _status(405, "MethodNotAllowed", f"{method} is not supported")

    def _store(self, key, body: dict, existing: dict | None) -> dict:
        """Writes ``body`` as the API server would, then lets the controller react."""
        stored = {k: copy.deepcopy(v) for k, v in body.items() if k != "status"}
        metadata = stored.setdefault("metadata", {})
        metadata["namespace"] = key[0]
        if existing is None:
            metadata.update(uid=f"uid-{key[1]}", generation=1,
                            creationTimestamp="2026-01-01T00:00:00Z")
        else:
            old = existing["metadata"]
            changed = stored.get("spec") != existing.get("spec")
            metadata.update(uid=old["uid"], creationTimestamp=old["creationTimestamp"],
                            generation=old["generation"] + (1 if changed else 0))
        metadata["resourceVersion"] = self._next_version()
        self.isvcs[key] = stored
        reply = copy.deepcopy(stored)
        if existing is not None and "status" in existing:
            reply["status"] = copy.deepcopy(existing["status"])
        stored["status"] = self._reconcile(key, stored, (existing or {}).get("status"))
        metadata["resourceVersion"] = self._next_version()  # the controller's status write
        return reply

    def _runtime(self, method, namespace, name, body):
        if method == "POST":
            name = ((body or {}).get("metadata") or {}).get("name", "")
            if (namespace, name) in self.runtimes:
                return 409, _status(409, "AlreadyExists", f"{name} already exists", name,
                                    "servingruntimes")
            stored = copy.deepcopy(body)
            stored["metadata"].update(namespace=namespace, resourceVersion=self._next_version())
            self.runtimes[(namespace, name)] = stored
            return 201, stored
        existing = self.runtimes.get((namespace, name))
        if existing is None:
            return 404, _status(404, "NotFound", f'servingruntimes.serving.kserve.io "{name}" '
                                "not found", name, "servingruntimes")
        if method == "GET":
            return 200, existing
        if method == "PUT":
            stored = copy.deepcopy(body)
            stored["metadata"].update(namespace=namespace, resourceVersion=self._next_version())
            self.runtimes[(namespace, name)] = stored
            return 200, stored
        return 405, _status(405, "MethodNotAllowed", f"{method} is not supported")

    # -- the controller side ----------------------------------------------------------------

    def _url(self, host: str, namespace: str) -> str:
        return self.url_template.format(host=host, namespace=namespace)

    def _reconcile(self, key, isvc: dict, previous_status: dict | None) -> dict:
        namespace, name = key
        state = self.controllers.setdefault(key, _Controller())
        predictor = dict(isvc["spec"]["predictor"])
        canary = predictor.pop("canaryTrafficPercent", None)
        template = json.dumps({"predictor": predictor,
                               "annotations": isvc["metadata"].get("annotations") or {}},
                              sort_keys=True)
        if template != state.template:
            state.template = template
            state.revisions += 1
            state.latest_created = f"{name}-predictor-{state.revisions:05d}"
        generation = isvc["metadata"]["generation"]
        if not self.ready_for(isvc):
            status = copy.deepcopy(previous_status or {})
            status["observedGeneration"] = generation
            status["conditions"] = [{
                "type": "Ready", "status": "False", "reason": "RevisionMissing",
                "message": f"Revision {state.latest_created} failed: container not ready",
            }]
            return status
        state.latest_ready = state.latest_created
        if canary is None or not state.latest_rolled_out:
            if state.latest_rolled_out != state.latest_ready:
                state.previous_rolled_out = state.latest_rolled_out
                state.latest_rolled_out = state.latest_ready
            canary = 100
        traffic = [self._target(namespace, name, "latest", state.latest_ready, canary, True)]
        if canary < 100 and state.latest_rolled_out != state.latest_ready:
            traffic.append(self._target(namespace, name, "prev", state.latest_rolled_out,
                                        100 - canary, False))
        else:
            traffic[0]["percent"] = 100
        return {
            "observedGeneration": generation,
            "url": self._url(name, namespace),
            "address": {"url": f"http://{name}.{namespace}.svc.cluster.local"},
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "PredictorReady", "status": "True"}],
            "components": {"predictor": {
                "latestCreatedRevision": state.latest_created,
                "latestReadyRevision": state.latest_ready,
                "latestRolledoutRevision": state.latest_rolled_out,
                "previousRolledoutRevision": state.previous_rolled_out or None,
                "url": self._url(f"{name}-predictor", namespace),
                "traffic": traffic,
            }},
        }

    def _target(self, namespace, name, tag, revision, percent, latest) -> dict:
        target = {"revisionName": revision, "percent": percent, "latestRevision": latest}
        if self.tag_routing:
            target.update(tag=tag, url=self._url(f"{tag}-{name}-predictor", namespace))
        return target

    # -- for the tests ----------------------------------------------------------------------

    def kserve_client(self, namespace: str = "kubeflow"):
        """A ``kserve.KServeClient`` talking to this stand-in.

        ``KServeClient()`` always loads a kubeconfig; this one points at the stand-in and is
        loaded into a private Configuration (not the process-wide default), to which the
        client's API objects are then bound."""
        from kserve import KServeClient
        from kubernetes import client

        if self._kubeconfig_dir is None:
            self._kubeconfig_dir = tempfile.TemporaryDirectory(prefix="kserve-standin-")
        path = Path(self._kubeconfig_dir.name) / "kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": {"token": "standin"}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin",
                                                          "user": "standin",
                                                          "namespace": namespace}}],
        }))
        configuration = client.Configuration()
        kserve_client = KServeClient(config_file=str(path), client_configuration=configuration,
                                     persist_config=False)
        api_client = client.ApiClient(configuration)
        kserve_client.api_instance = client.CustomObjectsApi(api_client)
        kserve_client.core_api = client.CoreV1Api(api_client)
        kserve_client.app_api = client.AppsV1Api(api_client)
        kserve_client.hpa_v2_api = client.AutoscalingV2Api(api_client)
        return kserve_client

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if self._kubeconfig_dir is not None:
            self._kubeconfig_dir.cleanup()

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path.split("?")[0]) for method, path, _ in self.calls]

    def isvc_writes(self) -> list[tuple[str, dict]]:
        """The POST and PUT bodies sent for InferenceServices, in order."""
        return [(method, body) for method, path, body in self.calls
                if method in ("POST", "PUT") and _ISVC.match(path)]

    def runtime_writes(self) -> list[tuple[str, dict]]:
        return [(method, body) for method, path, body in self.calls
                if method in ("POST", "PUT") and _RUNTIME.match(path)]

    def isvc(self, name: str = "fashion-mnist", namespace: str = "kubeflow") -> dict:
        return copy.deepcopy(self.isvcs[(namespace, name)])
