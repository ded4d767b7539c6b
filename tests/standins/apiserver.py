"""A stand-in for the Kubernetes API server: an object store with the API server's semantics for
the resources our steps and the preflight touch, recording every call. It is no cluster.

The rules it enforces, each from upstream source:

* Create answers 409 ``AlreadyExists`` when the object exists; reads, updates and deletes of a
  missing object answer 404 with a ``NotFound`` Status; a resource type the server does not
  serve answers a bare ``404 page not found`` (kubernetes/apiserver v0.33.9
  ``pkg/endpoints/handlers``; the Status shape of ``k8s.io/apimachinery/pkg/api/errors``).
* An update needs ``metadata.resourceVersion`` (422 when missing: custom resources allow no
  unconditional update) and answers 409 ``Conflict`` when it is stale
  (kubernetes/apiextensions-apiserver v0.36.3 ``pkg/registry/customresource/strategy.go``
  L268-271).
* Create sets ``generation: 1`` and drops ``status``; an update keeps the old ``status`` and
  bumps ``generation`` only when something outside ``metadata`` changed (strategy.go
  L145-186). Status is written only by controllers (``write_status``), which bumps the
  resourceVersion but never the generation.
* Nulls the schema does not allow are pruned from what is stored, never rejected
  (apiextensions-apiserver v0.36.3 ``pkg/apiserver/customresource_handler.go`` L1431-1440,
  ``pkg/apiserver/schema/defaulting/prunenulls.go`` L21-50).
* A list answers the objects its ``labelSelector`` selects (equality-based terms:
  kubernetes/apimachinery v0.31.3 ``pkg/labels/selector.go``, as
  ``tests.standins.kubernetes.selects``).
* API discovery: ``GET /apis/<group>/<version>`` lists the resources served there (an
  ``APIResourceList``, each with its scope), 404 when the group/version is not served
  (kubernetes/apiserver ``pkg/endpoints/discovery``). Kubeflow Trainer v2 and its JobSet
  (``trainer``) are an add-on, served only once a test installs it
  (:meth:`ApiServerStandIn.install`); the Training Operator v1's TFJobs are
  served until a test uninstalls them (:meth:`ApiServerStandIn.uninstall`: a Kubeflow 26.03
  cluster has none); a PriorityClass (``scheduling.k8s.io/v1``) is always served, as by every
  API server. ``/openapi/v3`` publishes Trainer's TrainJob schema where Trainer is installed.
* A server-side dry run (``?dryRun=All`` on a create) answers what a create would store and
  stores nothing: the request passes through validation (``admit``) as a create does, then
  the storage skips the write, answering 409 when the object exists (kubernetes/apiserver
  v0.33.9 ``pkg/endpoints/handlers/create.go`` L182 (admission attributes carry the dry-run
  flag), ``pkg/registry/generic/registry/store.go`` L484 and L501 (uid, creationTimestamp and the
  strategy's defaults are filled in) and L526, ``pkg/registry/generic/registry/dryrun.go``
  L39-47 (``DryRunnableStorage.Create``: the object is copied out, never persisted, so it has
  no resourceVersion)). ``dryRun`` takes only ``All`` (422 otherwise: create.go L109-113,
  ``ValidateCreateOptions``). (Kueue's mutating webhook on a dry run, and Kueue, Volcano's and
  scheduler-plugins' APIs: the real API server and Kueue, tests/fmnist_kfp/preflight/
  test_scheduling.py and tests/fmnist_kfp/launcher/test_queued_on_the_cluster.py.)
* SelfSubjectAccessReview, made as the ``Impersonate-User`` when given, answers
  ``status.allowed``: with ``rbac=True`` by the stored RoleBindings of the namespace, each naming
  a Role of that namespace or a ClusterRole (a rule allows when its apiGroups, resources
  (``resource/subresource``), verbs and resourceNames match, ``*`` matching all: kubernetes
  ``pkg/apis/rbac/v1/evaluation_helpers.go`` ``RuleAllows``), else by ``allowed``. A ClusterRole
  with an ``aggregationRule`` has the rules of every ClusterRole its label selectors match, as
  kubernetes' ``pkg/controller/clusterroleaggregation/clusterroleaggregation_controller.go``
  fills them in (v1.31: ``syncClusterRole``, the union of the selected roles' rules; the
  selected roles' own rules are filled the same way, so aggregation nests). Impersonation needs
  the ``impersonate`` verb (403 when ``impersonation`` is off).

Faults can be injected per request (``faults``): an HTTP status, a delay past the client's
timeout, or a dropped connection; and, for every stand-in at once, seeded and repeatable
(``tests.standins.loopback.FaultMode``: ``FMNIST_STANDIN_FAULTS=<seed>`` or
``loopback.faults(seed)``). Every resource request is recorded as the authorizer sees it
(``loopback.recording``).
"""

from __future__ import annotations

import copy
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.standins.kubernetes import REASONS, selects
from tests.standins.loopback import (
    JsonRequestHandler,
    LoopbackServer,
    faulted,
    reply_bytes,
    reply_json,
)

# (group, version, plural) -> kind, for everything the stand-in serves.
CORE = {
    ("", "v1", "serviceaccounts"): "ServiceAccount",
    ("", "v1", "secrets"): "Secret",
    ("", "v1", "configmaps"): "ConfigMap",
    ("", "v1", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("", "v1", "pods"): "Pod",
    ("apps", "v1", "deployments"): "Deployment",
    ("batch", "v1", "jobs"): "Job",  # manifests/pvc's permissions Job, stored as applied
    ("serving.kserve.io", "v1beta1", "inferenceservices"): "InferenceService",
    ("serving.kserve.io", "v1alpha1", "servingruntimes"): "ServingRuntime",
    ("security.istio.io", "v1beta1", "authorizationpolicies"): "AuthorizationPolicy",
    ("networking.k8s.io", "v1", "networkpolicies"): "NetworkPolicy",  # tests/standins/network.py
    ("rbac.authorization.k8s.io", "v1", "roles"): "Role",
    ("rbac.authorization.k8s.io", "v1", "rolebindings"): "RoleBinding",
    ("kubeflow.org", "v1", "tfjobs"): "TFJob",
    # Kubeflow Trainer v2 and the JobSet it installs (add-on "trainer"; stored as written: the
    # real Trainer runs them on the local cluster, tests/cluster.py).
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"): "TrainJob",
    ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"): "TrainingRuntime",
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"): "JobSet",
    ("kubeflow.org", "v1beta1", "experiments"): "Experiment",
    ("kubeflow.org", "v1beta1", "trials"): "Trial",
}
CLUSTER_SCOPED = {
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"): "CustomResourceDefinition",
    ("rbac.authorization.k8s.io", "v1", "clusterroles"): "ClusterRole",
    ("", "v1", "namespaces"): "Namespace",
    ("scheduling.k8s.io", "v1", "priorityclasses"): "PriorityClass",
    ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"): "ClusterTrainingRuntime",
}
# What a cluster serves only once the add-on is installed, by the groups each brings.
ADD_ONS = {
    "trainer": {key for key in {**CORE, **CLUSTER_SCOPED}
                if key[0] in ("trainer.kubeflow.org", "jobset.x-k8s.io")},
    "training-operator": {("kubeflow.org", "v1", "tfjobs")},
}
# Add-ons every stand-in has until a test uninstalls them (:meth:`ApiServerStandIn.uninstall`):
# the Training Operator v1, which the stand-ins served before Trainer v2 (Kubeflow 26.03 ships
# none: a test of such a cluster uninstalls it).
DEFAULT_ADD_ONS = ("training-operator",)
# The TrainJob CRD of each Trainer release, whose schema /openapi/v3 publishes.
TRAINJOB_CRDS = {"v2.1.0": "trainer-v2/trainjob.trainer.kubeflow.org_v1alpha1.yaml",
                 "v2.2.0": "trainer-v2.2.0/trainjob.trainer.kubeflow.org_v1alpha1.yaml"}
# Custom resources: their status is a subresource, so the main resource cannot write it.
WITH_STATUS_SUBRESOURCE = {"InferenceService", "Deployment"}
_PATH = re.compile(
    r"^/(?:api/(?P<core_version>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[^/?]+)(?:/(?P<name>[^/?]+))?"
    r"(?:/(?P<sub>status))?/?(?:\?|$)"
)


def status_reply(code: int, reason: str, message: str, name: str = "", kind: str = "",
                 group: str = "") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
            "details": {"name": name, "group": group, "kind": kind}}


def prune_nulls(value):
    """Drops null values at every level (prunenulls.go L21-50: no field of ours is nullable)."""
    if isinstance(value, dict):
        return {key: prune_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [prune_nulls(item) for item in value]
    return value


@dataclass
class Fault:
    """Answers the next ``times`` matching requests badly: ``status`` (e.g. 503), or
    ``delay`` seconds of silence, or ``drop`` (close without answering)."""

    method: str
    path_contains: str
    status: int = 0
    delay: float = 0.0
    drop: bool = False
    times: int = 1
    skip: int = 0  # let this many matching requests through first


@dataclass
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


class ApiServerStandIn(LoopbackServer):
    """The object store and its HTTP side; subclasses add controllers (``after_write``,
    ``before_read``). ``allowed``: the (verb, group, resource) a SelfSubjectAccessReview
    allows (None: all); ``forbidden_namespaces``: where every request answers 403."""

    def __init__(self, *, allowed: set | None = None, forbidden_namespaces: set | None = None,
                 rbac: bool = False):
        self.served = (set(CORE) | set(CLUSTER_SCOPED)) - set().union(
            *(keys for name, keys in ADD_ONS.items() if name not in DEFAULT_ADD_ONS))
        self.trainer_version = "v2.1.0"  # whose TrainJob schema /openapi/v3 publishes
        self.allowed = allowed
        self.rbac = rbac
        self.impersonation = True
        self.impersonated: list[str | None] = []
        self.forbidden_namespaces = set(forbidden_namespaces or ())
        self.calls: list[tuple[str, str, dict | None]] = []
        self.objects: dict[tuple, dict] = {}
        self.faults: list[Fault] = []
        self._version = 100
        self.lock = threading.RLock()
        self._kubeconfig_dir: tempfile.TemporaryDirectory | None = None
        self._serve(self._handler())

    def _serve(self, handler_class) -> None:
        super()._serve(handler_class)
        # Shut down within 20 ms rather than serve_forever's default half second.
        self.thread = threading.Thread(
            target=lambda: self.server.serve_forever(poll_interval=0.02), daemon=True)

    # -- the HTTP side ---------------------------------------------------------------------

    def _handler(self):
        standin = self

        class Handler(JsonRequestHandler):
            def _route(self, method: str, body=None):
                if faulted(self, method):
                    return None
                if method in ("POST", "PUT"):
                    body = self._body()
                standin.calls.append((method, self.path, copy.deepcopy(body)))
                if "selfsubjectaccessreviews" in self.path:
                    user = self.headers.get("Impersonate-User")
                    standin.impersonated.append(user)
                    if user and not standin.impersonation:
                        return reply_json(self, status_reply(
                            403, "Forbidden", f'users "{user}" is forbidden: User "standin" '
                            'cannot impersonate resource "users" in API group ""'), 403)
                    body = {**(body or {}), "_user": user}
                fault = standin._fault(method, self.path)
                if fault is not None:
                    if fault.drop:
                        self.close_connection = True
                        return
                    if fault.delay:
                        time.sleep(fault.delay)
                    if fault.status:
                        return reply_json(self, status_reply(
                            fault.status, REASONS.get(fault.status, "InternalError"
                                                      if fault.status >= 500 else "Unknown"),
                            f"injected {fault.status}"), fault.status)
                with standin.lock:
                    code, reply = standin.dispatch(method, self.path, body)
                if reply is None:  # what the API server says for a type it does not serve
                    return reply_bytes(self, b"404 page not found\n", 404,
                                       "text/plain; charset=utf-8")
                reply_json(self, reply, code)

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

            def do_PUT(self):
                self._route("PUT")

            def do_DELETE(self):
                self._route("DELETE")

        return Handler

    def _fault(self, method: str, path: str) -> Fault | None:
        chosen = None
        with self.lock:
            for fault in self.faults:  # every fault counts every matching request
                if fault.method == method and fault.path_contains in path and fault.times > 0:
                    if fault.skip > 0:
                        fault.skip -= 1
                    elif chosen is None:
                        fault.times -= 1
                        chosen = fault
        return chosen

    def install(self, *add_ons: str) -> None:
        """Serves the APIs of ``add_ons`` (keys of ``ADD_ONS``), as installing their CRDs
        does."""
        for name in add_ons:
            self.served |= ADD_ONS[name]

    def uninstall(self, *add_ons: str) -> None:
        """Stops serving the APIs of ``add_ons``, as deleting their CRDs does (a Kubeflow
        26.03 cluster: ``uninstall("training-operator")``)."""
        for name in add_ons:
            self.served -= ADD_ONS[name]

    def _openapi(self, path: str) -> dict | None:
        """``/openapi/v3`` (readable by every authenticated user: ``system:discovery``): the
        index, and Trainer's group with the TrainJob schema of ``trainer_version``'s CRD (the
        API server publishes each CRD's schema under its group-version-kind)."""
        from tests.crd_schemas import served_schema

        trainer = ("trainer.kubeflow.org", "v1alpha1", "trainjobs") in self.served
        group = "apis/trainer.kubeflow.org/v1alpha1"
        if path.split("?")[0] == "/openapi/v3":
            return {"paths": {group: {"serverRelativeURL": f"/openapi/v3/{group}?hash=0"}}
                    if trainer else {}}
        if path.split("?")[0] == f"/openapi/v3/{group}" and trainer:
            schema = {**served_schema(TRAINJOB_CRDS[self.trainer_version], "v1alpha1"),
                      "x-kubernetes-group-version-kind":
                      [{"group": "trainer.kubeflow.org", "version": "v1alpha1",
                        "kind": "TrainJob"}]}
            return {"openapi": "3.0.0", "components": {"schemas": {
                "ai.kubeflow.trainer.v1alpha1.TrainJob": schema}}}
        return None

    def resource(self, group: str, version: str, plural: str) -> Resource | None:
        key = (group, version, plural)
        if key not in self.served:
            return None
        if key in CORE:
            return Resource(group, version, plural, CORE[key])
        return Resource(group, version, plural, CLUSTER_SCOPED[key], namespaced=False)

    def dispatch(self, method: str, path: str, body) -> tuple[int, dict | None]:
        if path.startswith("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"):
            return self._access_review(body)
        if path.startswith("/openapi/v3") and method == "GET":
            document = self._openapi(path)
            return (200, document) if document is not None else (404, None)
        discovery = re.match(r"^/apis/([^/]+)/([^/?]+)/?(?:\?|$)", path)
        if discovery and method == "GET":
            resources = [{"name": plural, "singularName": "", "namespaced": key in CORE,
                          "kind": kind, "verbs": ["create", "delete", "get", "list", "patch",
                                                  "update", "watch"]}
                         for key, kind in {**CORE, **CLUSTER_SCOPED}.items()
                         for group, version, plural in [key]
                         if (group, version) == (discovery[1], discovery[2])
                         and key in self.served]
            if not resources:
                return 404, None
            return 200, {"kind": "APIResourceList", "apiVersion": "v1",
                         "groupVersion": f"{discovery[1]}/{discovery[2]}",
                         "resources": resources}
        match = _PATH.match(path)
        if not match:
            return 404, None
        group = match["group"] or ""
        version = match["core_version"] or match["version"]
        resource = self.resource(group, version, match["plural"])
        if resource is None or (resource.namespaced and not match["namespace"]):
            return 404, None
        namespace = match["namespace"] or ""
        if namespace in self.forbidden_namespaces:
            return 403, status_reply(403, "Forbidden", f'{resource.qualified} is forbidden: '
                                     'User "system:serviceaccount:kubeflow:pipeline-runner" '
                                     f'cannot {method.lower()} resource "{resource.plural}" in '
                                     f'API group "{group}" in the namespace "{namespace}"')
        query = parse_qs(urlsplit(path).query)
        selector = query.get("labelSelector", [""])[0]
        dry_run = query.get("dryRun", [])
        if method == "POST" and dry_run and dry_run != ["All"]:  # create.go L109-113
            return 422, status_reply(422, "Invalid", f'CreateOptions.meta.k8s.io "" is invalid: '
                                     f'dryRun: Unsupported value: {dry_run}: supported values: '
                                     '"All"', "", "CreateOptions", "meta.k8s.io")
        return self.handle(method, resource, namespace, match["name"], body, selector,
                           dry_run=bool(dry_run))

    def handle(self, method, resource: Resource, namespace: str, name: str | None, body,
               selector: str = "", dry_run: bool = False):
        if method == "POST":
            return self.create(resource, namespace, body, dry_run=dry_run)
        key = (resource.kind, namespace, name)
        if method == "GET" and name is None:  # a list, by label selector when one is given
            items = [copy.deepcopy(obj) for (kind, ns, _), obj in self.objects.items()
                     if kind == resource.kind and ns == namespace
                     and selects(selector, (obj.get("metadata") or {}).get("labels") or {})]
            return 200, {"apiVersion": resource.api_version, "kind": f"{resource.kind}List",
                         "metadata": {}, "items": items}
        if key not in self.objects:
            return 404, status_reply(404, "NotFound", f'{resource.qualified} "{name}" not found',
                                     name, resource.plural, resource.group)
        if method == "GET":
            self.before_read(resource.kind, namespace, name)
            return 200, copy.deepcopy(self.objects[key])
        if method == "DELETE":
            self.objects.pop(key)
            self.after_delete(resource.kind, namespace, name)
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                         "details": {"name": name, "kind": resource.plural}}
        if method == "PUT":
            return self.update(resource, key, body)
        return 405, status_reply(405, "MethodNotAllowed", f"{method} is not supported")

    # -- the store -----------------------------------------------------------------------

    def next_version(self) -> str:
        self._version += 1
        return str(self._version)

    @staticmethod
    def undecodable(resource: Resource, body: dict) -> tuple[int, dict] | None:
        """A body of another version or kind than the URL's resource is refused with 400, as
        the API server's decoder refuses it (kubernetes/apiserver v0.33.9
        pkg/endpoints/handlers/create.go lines 127-147, update.go lines 114-134: the version
        checked against the URL's; a kind the scheme does not know for it fails the decode).
        Either left out defaults to the URL's."""
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != resource.api_version:
            return 400, status_reply(400, "BadRequest", f"the API version in the data "
                                     f"({api_version}) does not match the expected API version "
                                     f"({resource.api_version})")
        if kind and kind != resource.kind:
            return 400, status_reply(400, "BadRequest", f'no kind "{kind}" is registered for '
                                     f'version "{resource.api_version}"')
        return None

    def create(self, resource: Resource, namespace: str, body: dict, dry_run: bool = False):
        """A create; ``dry_run``: everything a create does but the write (the module's
        docstring)."""
        body = prune_nulls(copy.deepcopy(body or {}))
        refused = self.undecodable(resource, body)
        if refused:
            return refused
        name = (body.get("metadata") or {}).get("name", "")
        key = (resource.kind, namespace, name)
        denied = self.admit(resource.kind, body, None)
        if denied:
            return denied
        if key in self.objects:
            return 409, status_reply(409, "AlreadyExists", f'{resource.qualified} "{name}" '
                                     "already exists", name, resource.plural, resource.group)
        if resource.kind in WITH_STATUS_SUBRESOURCE:
            body.pop("status", None)
        metadata = body.setdefault("metadata", {})
        if namespace:
            metadata["namespace"] = namespace
        metadata.update(uid=f"uid-{resource.kind.lower()}-{name}", generation=1,
                        creationTimestamp="2026-01-01T00:00:00Z")
        if dry_run:
            return 201, copy.deepcopy(body)
        metadata["resourceVersion"] = self.next_version()
        self.objects[key] = body
        self.after_write(resource.kind, namespace, name, None)
        return 201, copy.deepcopy(body)

    def update(self, resource: Resource, key: tuple, body: dict):
        body = prune_nulls(copy.deepcopy(body or {}))
        refused = self.undecodable(resource, body)
        if refused:
            return refused
        existing = self.objects[key]
        name = key[2]
        version = (body.get("metadata") or {}).get("resourceVersion")
        if not version:
            return 422, status_reply(422, "Invalid", "metadata.resourceVersion: Invalid value: "
                                     "0x0: must be specified for an update", name,
                                     resource.kind, resource.group)
        if version != existing["metadata"]["resourceVersion"]:
            return 409, status_reply(409, "Conflict", f"Operation cannot be fulfilled on "
                                     f'{resource.qualified} "{name}": the object has been '
                                     "modified; please apply your changes to the latest version "
                                     "and try again", name, resource.plural, resource.group)
        denied = self.admit(resource.kind, body, existing)
        if denied:
            return denied
        if resource.kind in WITH_STATUS_SUBRESOURCE:
            body.pop("status", None)
            if "status" in existing:
                body["status"] = copy.deepcopy(existing["status"])
        old = existing["metadata"]
        changed = ({k: v for k, v in body.items() if k != "metadata"}
                   != {k: v for k, v in existing.items() if k != "metadata"})
        body["metadata"].update(uid=old["uid"], creationTimestamp=old["creationTimestamp"],
                                namespace=old.get("namespace", ""),
                                generation=old["generation"] + (1 if changed else 0),
                                resourceVersion=self.next_version())
        self.objects[key] = body
        self.after_write(resource.kind, key[1], name, existing)
        return 200, copy.deepcopy(body)

    def write_status(self, key: tuple, status: dict) -> None:
        """What a controller's status update does: a new resourceVersion, no new generation."""
        obj = self.objects[key]
        obj["status"] = prune_nulls(status)
        obj["metadata"]["resourceVersion"] = self.next_version()

    def put(self, obj: dict) -> dict:
        """Stores ``obj`` as if created (for a test's setup); returns the stored copy."""
        api_version = obj["apiVersion"]
        group, _, version = api_version.rpartition("/")
        plural = next(p for (g, v, p), kind in {**CORE, **CLUSTER_SCOPED}.items()
                      if g == group and v == version and kind == obj["kind"])
        resource = self.resource(group, version, plural) or Resource(
            group, version, plural, obj["kind"], (group, version, plural) in CORE)
        namespace = (obj.get("metadata") or {}).get("namespace", "") if resource.namespaced \
            else ""
        with self.lock:
            code, stored = self.create(resource, namespace, obj)
        assert code == 201, stored
        return stored

    # -- hooks for controllers -------------------------------------------------------------

    def admit(self, kind: str, body: dict, old: dict | None):
        """A validating webhook's answer: None to admit, else ``(code, Status)``."""
        return None

    def after_write(self, kind: str, namespace: str, name: str, old: dict | None) -> None:
        pass

    def after_delete(self, kind: str, namespace: str, name: str) -> None:
        pass

    def before_read(self, kind: str, namespace: str, name: str) -> None:
        pass

    # -- SelfSubjectAccessReview -------------------------------------------------------------

    def _access_review(self, body: dict):
        body = dict(body or {})
        user = body.pop("_user", None)
        attributes = (body.get("spec") or {}).get("resourceAttributes") or {}
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource += "/" + attributes["subresource"]
        verb, group = attributes.get("verb"), attributes.get("group", "")
        if self.rbac:
            allowed = self._rbac_allows(user, attributes.get("namespace", ""), verb, group,
                                        resource, attributes.get("name", ""))
        else:
            allowed = self.allowed is None or (verb, group, resource) in self.allowed
        reply = {**body, "apiVersion": "authorization.k8s.io/v1",
                 "kind": "SelfSubjectAccessReview",
                 "status": {"allowed": allowed, "reason": "" if allowed else "no RBAC rule"}}
        return 201, reply

    def _rbac_allows(self, user, namespace, verb, group, resource, name) -> bool:
        parts = (user or "").split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            return False
        account_namespace, account = parts[2], parts[3]
        for (kind, ns, _), binding in list(self.objects.items()):
            if kind != "RoleBinding" or ns != namespace:
                continue
            if not any(subject.get("kind") == "ServiceAccount" and subject.get("name") == account
                       and subject.get("namespace", ns) == account_namespace
                       for subject in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            rules = (self._cluster_role_rules(ref["name"]) if ref.get("kind") == "ClusterRole"
                     else (self.objects.get(("Role", ns, ref["name"])) or {}).get("rules") or [])
            for rule in rules:
                def has(values, wanted):
                    return "*" in (values or []) or wanted in (values or [])
                if (has(rule.get("apiGroups"), group) and has(rule.get("resources"), resource)
                        and has(rule.get("verbs"), verb)
                        and (not rule.get("resourceNames") or name in rule["resourceNames"])):
                    return True
        return False

    def _cluster_role_rules(self, name: str, seen: frozenset = frozenset()) -> list[dict]:
        """A ClusterRole's rules, aggregated as the clusterrole-aggregation controller does."""
        role = self.objects.get(("ClusterRole", "", name))
        if role is None or name in seen:
            return []
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors")
        if not selectors:
            return list(role.get("rules") or [])
        rules = []
        for (kind, _, other), candidate in list(self.objects.items()):
            labels = (candidate.get("metadata") or {}).get("labels") or {}
            if kind == "ClusterRole" and other != name and any(
                    all(labels.get(k) == v for k, v in (s.get("matchLabels") or {}).items())
                    for s in selectors):
                rules += self._cluster_role_rules(other, seen | {name})
        return rules

    # -- for the tests -------------------------------------------------------------------

    def api_client(self, namespace: str = "kubeflow"):
        """A ``kubernetes.client.ApiClient`` talking to this stand-in (a private
        Configuration loaded from a kubeconfig that points here)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig(namespace)),
                                client_configuration=configuration, persist_config=False)
        return client.ApiClient(configuration)

    def kubeconfig(self, namespace: str = "kubeflow") -> Path:
        if self._kubeconfig_dir is None:
            self._kubeconfig_dir = tempfile.TemporaryDirectory(prefix="apiserver-standin-")
        path = Path(self._kubeconfig_dir.name) / f"kubeconfig-{namespace}"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": {"token": "standin"}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin",
                                                          "user": "standin",
                                                          "namespace": namespace}}],
        }))
        return path

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if self._kubeconfig_dir is not None:
            self._kubeconfig_dir.cleanup()

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path.split("?")[0]) for method, path, _ in self.calls]

    def get(self, kind: str, name: str, namespace: str = "kubeflow") -> dict:
        return copy.deepcopy(self.objects[(kind, namespace, name)])
