"""Kubeflow as preflight meets it, on a real API server: kube-apiserver v1.34.1 with RBAC and
the controller manager (tests/cluster.py, no node: preflight only reads, asks access reviews
and sends dry runs), the CRDs of a Kubeflow 1.11 install (the Training Operator v1's TFJob,
Katib's, KServe's, Istio's AuthorizationPolicy) and the README's setup in ``kubeflow``
(:func:`ready_cluster`). One API server serves every test of the session; each test's changes,
made through :class:`KubeflowOnTheApiServer`, are undone when it ends (:meth:`restore`).

What the real server decides that the old stand-in only played: discovery (a CRD deleted is
an API no longer served), strict schemas, the RBAC authorizer answering the access reviews
preflight asks as the steps' ServiceAccount (impersonated), the PV controller binding the
claim, and server-set ``creationTimestamp``s (so Katib's start is written relative to the
TFJob CRD's real one, :meth:`KubeflowOnTheApiServer.katib_started`)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import SHARED_CRDS
from tests.fmnist_kfp.preflight.cluster import (
    KATIB_CONFIG,
    NS,
    katib_controller_pod,
    rules_without,
)
from tests.setup_manifests import build

# The CRDs of a Kubeflow 1.11 install that preflight reads (../shared/crds), and Istio's
# AuthorizationPolicy (manifests/serving-access applies one), from istio.io/api at the version
# KServe v0.16.0's go.mod pins (v1.27.1: kubernetes/customresourcedefinitions.gen.yaml).
KUBEFLOW_CRDS = tuple(name for name in SHARED_CRDS if not name.startswith("trainer-v2/"))
ISTIO_CRD = "authorizationpolicies.security.istio.io"
# Kubeflow Trainer v2.1.0 and its JobSet v0.10.1 (Kubeflow 26.03), installed by a test
# (:meth:`KubeflowOnTheApiServer.install_trainer`).
TRAINER_CRDS = tuple(name for name in SHARED_CRDS if name.startswith("trainer-v2/"))
KUBEFLOW_1_11 = "Kubeflow 1.11"
TESTS_CRDS = Path(__file__).parents[2] / "crds"  # upstream CRDs kept beside the tests
# The gang schedulers' CRDs (tests/crds), installed by a test (Kubeflow ships neither).
GANG_CRDS = ("scheduling.volcano.sh_podgroups.yaml", "scheduling.volcano.sh_queues.yaml",
             "scheduling.x-k8s.io_podgroups.yaml")
# Kueue v0.19.2's CRDs that preflight reads (tests/crds), installed by a test with no Kueue
# running (the real Kueue's rows: tests/fmnist_kfp/launcher/test_queued_on_the_cluster.py).
KUEUE_CRDS = ("kueue.x-k8s.io_localqueues.yaml", "kueue.x-k8s.io_workloadpriorityclasses.yaml")
# Kinds whose status a program that does not run here writes (the kubelet, Volcano's
# scheduler): written by the tests (write_status), and restored with the object.
STATUS_WRITTEN_HERE = ("Pod", "Queue")
TFJOB_CRD = "tfjobs.kubeflow.org"
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
# katib-controller's pod is never scheduled here (no node): a scheduler that does not exist
# leaves it alone, and its status is written as the kubelet would write it.
UNSCHEDULED = "not-scheduled-here"
KATIB_AFTER_CRD = timedelta(minutes=10)  # katib-controller started this long after the CRD
ESTABLISHED_SECONDS = 60
VOLUME = "fmnist-data-volume"  # the PersistentVolume the claim fmnist-data is bound to
RUNNER = f"system:serviceaccount:{NS}:pipeline-runner"
RUNNER_ROLE = "fmnist-pipeline-runner"  # manifests/standalone-rbac's Role
USER = "preflight-user"  # the identity of run_as_one_who_may_not
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]


def _crd_documents(files: tuple[str, ...] = KUBEFLOW_CRDS, istio: bool = True,
                   folder: Path | None = None) -> dict[str, dict]:
    """Each CRD of ``files`` (in ``folder``, by default ../shared/crds; and Istio's) by
    name."""
    from localcluster import operators
    from tests.cluster import crds_dir

    documents = [doc for name in files for doc in operators.yaml_documents(
        ((folder or crds_dir()) / name).read_text())]
    if istio:
        module = operators.module_dir(operators.KSERVE_V0_16.module, "istio.io/api")
        documents += [doc for doc in operators.yaml_documents(
            (module / "kubernetes" / "customresourcedefinitions.gen.yaml").read_text())
            if doc["metadata"]["name"] == ISTIO_CRD]
    return {doc["metadata"]["name"]: doc for doc in documents}


def _time(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fresh(obj: dict) -> dict:
    """``obj`` as a manifest again: without what the server sets on a stored object."""
    obj = copy.deepcopy(obj)
    metadata = obj.get("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields",
                "deletionTimestamp", "deletionGracePeriodSeconds"):
        metadata.pop(key, None)
    return obj


class KubeflowOnTheApiServer:
    """The API server's admin, the changes a test makes, and how to undo them."""

    def __init__(self, plane, cluster) -> None:
        self.plane = plane
        self.cluster = cluster  # tests.cluster.RealCluster
        self.api_client = cluster.api_client
        self.crds = _crd_documents()  # installed by ready_cluster
        self.trainer_crds = _crd_documents(TRAINER_CRDS, istio=False)
        self.gang_crds = _crd_documents(GANG_CRDS, istio=False, folder=TESTS_CRDS)
        self.kueue_crds = _crd_documents(KUEUE_CRDS, istio=False, folder=TESTS_CRDS)
        self._older: dict[str, dict] = {}  # CRDs as an older release had them (install_older)
        self._undo: list[Callable[[], None]] = []
        self._deleting: list[str] = []  # namespaces deleted, not yet gone
        # The shape the tests start from: Kubeflow 1.11 as ready_cluster leaves it, or one
        # made from it by :meth:`use_shape` (undone by _shape_undo) for the tests that follow.
        self.shape = KUBEFLOW_1_11
        self._shape_undo: list[Callable[[], None]] = []
        self._kubeconfigs: dict[tuple[str, str], Path] = {}
        self._user_token = ""  # preflight's identity, when not the admin's

    # -- reading and writing ---------------------------------------------------------------

    def path(self, manifest: dict) -> str:
        return f"{self.cluster.collection_path(manifest)}/{manifest['metadata']['name']}"

    def read(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict | None:
        ref = {"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
        return self.cluster.read_or_none(self.path(ref))

    def _call(self, path: str, method: str, body=None, query=None) -> Any:
        return self.api_client.call_api(
            path, method, body=body, query_params=query or [], response_type="object",
            auth_settings=["BearerToken"], _return_http_data_only=True)

    def _write(self, manifest: dict) -> dict:
        """Creates ``manifest`` or replaces the stored object of its name, whole."""
        from kubernetes.client.exceptions import ApiException

        path = self.path(manifest)
        stored = self.cluster.read_or_none(path)
        if stored is None:
            return self._call(self.cluster.collection_path(manifest), "POST", manifest)
        body = copy.deepcopy(manifest)
        body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        try:
            return self._call(path, "PUT", body)
        except ApiException as error:
            if error.status != 422:
                raise
            # An immutable field changed (a claim's access modes): deleted and made again.
            self._delete(path)
            return self._call(self.cluster.collection_path(manifest), "POST", manifest)

    def _delete(self, path: str, wait: bool = True) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._call(path, "DELETE", query=[("gracePeriodSeconds", "0")])
        except ApiException as error:
            if error.status != 404:
                raise
        if wait:
            assert self.cluster.gone(path), f"{path} still there"

    def put(self, manifest: dict) -> dict:
        """Stores ``manifest`` (created or replaced); undone at :meth:`restore`."""
        before = self.cluster.read_or_none(self.path(manifest))
        self._undo.append(self._restorer(manifest, before))
        return self._write(manifest)

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> None:
        """Deletes the object; made again at :meth:`restore`."""
        ref = {"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
        before = self.cluster.read_or_none(self.path(ref))
        assert before is not None, f"no {kind} {namespace}/{name} to delete"
        self._undo.append(self._restorer(ref, before))
        self._delete(self.path(ref))

    def edit(self, api_version: str, kind: str, name: str, namespace: str,
             change: Callable[[dict], None]) -> dict:
        """Reads the object, lets ``change`` edit it in place, stores it."""
        stored = self.read(api_version, kind, name, namespace)
        assert stored is not None, f"no {kind} {namespace}/{name} to edit"
        edited = _fresh(stored)
        edited.pop("status", None)
        change(edited)
        return self.put(edited)

    def _restorer(self, manifest: dict, before: dict | None) -> Callable[[], None]:
        path = self.path(manifest)

        def restore() -> None:
            if before is None:
                # A namespace is gone once the namespace controller has emptied it, a volume
                # once its claim is (pv-protection): waited for together at the end.
                later = manifest["kind"] in ("Namespace", "PersistentVolume")
                self._delete(path, wait=not later)
                if later:
                    self._deleting.append(path)
                return
            if before["kind"] == "PersistentVolumeClaim":
                self._claim_again(before)
                return
            kept = _fresh(before)
            status = kept.pop("status", None)
            stored = self._write(kept)
            if status and before["kind"] in STATUS_WRITTEN_HERE:
                self._call(f"{path}/status", "PUT", {**stored, "status": status})
        return restore

    def _claim_again(self, before: dict) -> None:
        """Claim ``before`` made again as a user makes it, and bound by the PV controller to
        the volume made for it: the claim there now deleted, the volume's claimRef (which
        names the old claim's uid) reset to the claim's name, then the claim created."""
        name = before["metadata"]["name"]
        self._delete(self.path(before))
        volume = _fresh(self.read("v1", "PersistentVolume", VOLUME))
        volume.pop("status", None)
        volume["spec"]["claimRef"] = {"namespace": NS, "name": name}
        self._write(volume)
        claim = _fresh(before)
        claim.pop("status", None)
        claim["spec"].pop("volumeName", None)
        claim["metadata"]["annotations"] = {
            key: value for key, value in claim["metadata"].get("annotations", {}).items()
            if not key.startswith(("pv.kubernetes.io/", "volume.kubernetes.io/"))}
        self._write(claim)
        self.until_bound(name)

    def bind_claim(self, namespace: str, name: str) -> None:
        """A volume made for claim ``name`` of ``namespace`` (deleted at :meth:`restore`), and
        the claim Bound to it by the PV controller."""
        self.put({"apiVersion": "v1", "kind": "PersistentVolume",
                  "metadata": {"name": f"{namespace}-{name}"},
                  "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteMany"],
                           "hostPath": {"path": str(self.plane.state_dir / namespace)},
                           "persistentVolumeReclaimPolicy": "Retain",
                           "claimRef": {"namespace": namespace, "name": name}}})
        self.until_bound(name, namespace)

    def until_granted(self, namespace: str, account: str, permissions, granted: bool = True
                      ) -> None:
        """Until the authorizer answers ``granted`` for each of ``permissions`` (preflight's
        rows: verb, group, resource, subresource, why) to ServiceAccount ``account``: the
        aggregation controller fills a ClusterRole's rules a moment after it is written."""
        for verb, group, resource, sub, _ in permissions:
            self._until_allowed(verb, group, f"{resource}/{sub}" if sub else resource, granted,
                                user=f"system:serviceaccount:{namespace}:{account}",
                                namespace=namespace)

    def until_bound(self, name: str, namespace: str = NS) -> None:
        """Until the PV controller has bound claim ``name``."""
        deadline = time.monotonic() + ESTABLISHED_SECONDS
        while (self.read("v1", "PersistentVolumeClaim", name, namespace).get("status") or {}
               ).get("phase") != "Bound":
            if time.monotonic() > deadline:
                raise TimeoutError(f"the claim {name} is not Bound")
            time.sleep(0.2)

    def drop_permission(self, verb: str, group: str, resource: str) -> None:
        """manifests/standalone-rbac's Role without ``verb`` on ``resource`` (``plural`` or
        ``plural/subresource``) of ``group``, once the authorizer denies it (it reads Roles
        from an informer: a write takes effect a moment later); granted again at
        :meth:`restore`, once the authorizer allows it again."""

        def without(role: dict) -> None:
            role["rules"] = rules_without(role["rules"], verb, group, resource)

        self.edit("rbac.authorization.k8s.io/v1", "Role", RUNNER_ROLE, NS, without)
        restore_role = self._undo.pop()
        self._undo.append(lambda: (restore_role(), self._until_allowed(verb, group, resource,
                                                                        True)))
        self._until_allowed(verb, group, resource, False)

    def _until_allowed(self, verb: str, group: str, resource: str, allowed: bool,
                       user: str = RUNNER, namespace: str = NS) -> None:
        plural, _, sub = resource.partition("/")
        account_namespace = user.split(":")[2]
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": user, "groups": [
                      "system:serviceaccounts", f"system:serviceaccounts:{account_namespace}"],
                           "resourceAttributes": {"namespace": namespace, "verb": verb,
                                                  "group": group, "resource": plural,
                                                  "subresource": sub}}}
        deadline = time.monotonic() + ESTABLISHED_SECONDS
        while self._call("/apis/authorization.k8s.io/v1/subjectaccessreviews", "POST",
                         review)["status"].get("allowed", False) != allowed:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{user} {verb} {resource}: allowed is not {allowed}")
            time.sleep(0.1)

    def uninstall_crd(self, name: str) -> None:
        """Deletes CRD ``name``: its API is no longer served, its objects are gone. Installed
        again at :meth:`restore`, with those objects."""
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        crd = self._known_crd(name)
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        objects = self._call(f"/apis/{crd['spec']['group']}/{version}/"
                             f"{crd['spec']['names']['plural']}", "GET")["items"]

        def again() -> None:
            self.install_crd(name)
            for obj in objects:
                self._restorer(obj, obj)()

        self._undo.append(again)
        self._delete(path)
        self._until_discovery(name, served=False)

    def install_crd(self, name: str) -> None:
        """Creates CRD ``name`` and waits until discovery serves it."""
        self._call("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST",
                   self._known_crd(name))
        self._until_discovery(name, served=True)

    def _known_crd(self, name: str) -> dict:
        return {**self.crds, **self.trainer_crds, **self.gang_crds, **self.kueue_crds,
                **self._older}[name]

    def install(self, name: str) -> None:
        """CRD ``name`` installed; uninstalled at :meth:`restore`."""
        self.install_crd(name)
        self._undo.append(lambda: self._uninstall(name))

    def install_older(self, name: str, version: str) -> None:
        """CRD ``name`` as an older release of its project had it: serving ``version`` alone,
        stored at it (its newer versions are the later releases'); uninstalled at
        :meth:`restore`."""
        crd = copy.deepcopy(self._known_crd(name))
        crd["spec"]["versions"] = [{**v, "storage": True} for v in crd["spec"]["versions"]
                                   if v["name"] == version]
        assert crd["spec"]["versions"], f"{name} has no version {version}"
        crd["spec"].pop("conversion", None)
        self._undo.append(lambda: self._older.pop(name))
        self._older[name] = crd
        self.install(name)

    def write_status(self, manifest: dict, status: dict) -> None:
        """The stored object's status, as the program that owns it (not running here) would
        write it (:data:`STATUS_WRITTEN_HERE`); the old one back at :meth:`restore`."""
        path = self.path(manifest)
        stored = self.cluster.read_or_none(path)
        assert stored is not None, f"no {path}"
        self._undo.append(self._restorer(manifest, stored))
        self._call(f"{path}/status", "PUT", {**stored, "status": status})

    def install_trainer(self) -> None:
        """Kubeflow Trainer v2's and JobSet's CRDs, installed (as Kubeflow 26.03 installs them,
        with Katib: katib-controller started after them). Uninstalled at :meth:`restore`."""
        for name in self.trainer_crds:
            self.install_crd(name)
            self._undo.append((lambda n: lambda: self._uninstall(n))(name))
        self._katib_after_the_crd()

    def _uninstall(self, name: str) -> None:
        self._delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        self._until_discovery(name, served=False)

    def _until_discovery(self, name: str, served: bool) -> None:
        from kubernetes.client.exceptions import ApiException

        crd = self._known_crd(name)
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        deadline = time.monotonic() + ESTABLISHED_SECONDS
        while True:
            try:
                resources = self._call(f"/apis/{group}/{version}", "GET")["resources"]
                found = any(r["name"] == plural for r in resources)
            except ApiException as error:
                if error.status != 404:
                    raise
                found = False
            if found == served:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} {'not ' if served else ''}served after "
                                   f"{ESTABLISHED_SECONDS} s")
            time.sleep(0.1)

    # -- Katib's start against the CRD -------------------------------------------------------

    def crd_created(self, name: str = TFJOB_CRD) -> datetime:
        crd = self.read("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        assert crd is not None, f"no CRD {name}"
        return datetime.fromisoformat(crd["metadata"]["creationTimestamp"].replace("Z",
                                                                                    "+00:00"))

    def katib_started(self, started: datetime, container_started: datetime | None = None
                      ) -> None:
        """katib-controller's pod status, as its kubelet would write it: the pod started at
        ``started``, its container at ``container_started`` (default: the same)."""
        pod = katib_controller_pod(_time(started),
                                   _time(container_started) if container_started else None)
        path = self.path(pod)
        stored = self.cluster.read_or_none(path)
        assert stored is not None, "no katib-controller pod"
        self._undo.append(self._restorer(pod, stored))
        self._call(f"{path}/status", "PUT", {**stored, "status": pod["status"]})

    # -- what preflight is given -------------------------------------------------------------

    def kubeconfig(self, namespace: str) -> Path:
        """The kubeconfig preflight is given, with ``namespace`` as its context's namespace:
        the admin's, or the user's of :meth:`run_as_one_who_may_not` for the rest of a test."""
        key = (namespace, self._user_token)
        if key not in self._kubeconfigs:
            config = yaml.safe_load(self.plane.kubeconfig("admin").read_text())
            for context in config["contexts"]:
                context["context"]["namespace"] = namespace
            if self._user_token:
                for user in config["users"]:
                    user["user"] = {"token": self._user_token}
            path = self.plane.state_dir / f"kubeconfig-{len(self._kubeconfigs)}"
            path.write_text(yaml.safe_dump(config))
            path.chmod(0o600)
            self._kubeconfigs[key] = path
        return self._kubeconfigs[key]

    def run_as_one_who_may_not(self, *denied: tuple[str, str], impersonate: bool = True
                               ) -> None:
        """For the rest of the test, preflight runs as a user who may do all an admin may
        (every verb on every resource API discovery lists) but anything on ``denied``
        ((API group, plural) pairs: the resource and its subresources) and, unless
        ``impersonate``, impersonation: the ServiceAccount ``preflight-user`` of ``default``,
        by a ClusterRole of those rules, once the authorizer has them."""
        rules = []
        for group, resources in self._discovered().items():
            kept = sorted(r for r in resources if (group, r.split("/")[0]) not in denied)
            if kept:
                rules.append({"apiGroups": [group], "resources": kept, "verbs": VERBS})
        if impersonate:
            rules.append({"apiGroups": [""], "resources": ["users", "groups",
                                                           "serviceaccounts"],
                          "verbs": ["impersonate"]})
        rbac = "rbac.authorization.k8s.io/v1"
        self.put({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": USER, "namespace": "default"}})
        self.put({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": USER},
                  "rules": rules})
        self.put({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": USER},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": USER},
                  "subjects": [{"kind": "ServiceAccount", "name": USER,
                                "namespace": "default"}]})
        self._until_allowed("get", "", "configmaps", True,
                            user=f"system:serviceaccount:default:{USER}", namespace="default")
        self._user_token = self.cluster.token_for("default", USER)
        self._undo.append(lambda: setattr(self, "_user_token", ""))

    def _discovered(self) -> dict[str, set[str]]:
        """Every resource (and subresource) the API server serves, by API group."""
        served = {"": {r["name"] for r in self._call("/api/v1", "GET")["resources"]}}
        for group in self._call("/apis", "GET")["groups"]:
            for version in group["versions"]:
                served.setdefault(group["name"], set()).update(
                    r["name"] for r in self._call(f"/apis/{version['groupVersion']}",
                                                  "GET")["resources"])
        return served

    def restore(self) -> None:
        """Undoes the test's changes, the last first, back to the shape it started from;
        katib-controller started after the trial kinds' CRDs again (a CRD made again is
        younger)."""
        self._undo_all(self._undo)
        self._katib_after_the_crd()

    def _undo_all(self, undo: list[Callable[[], None]]) -> None:
        while undo:
            undo.pop()()
        while self._deleting:
            path = self._deleting.pop()
            assert self.cluster.gone(path, seconds=120), f"{path} still there"

    def use_shape(self, name: str, make: Callable[[KubeflowOnTheApiServer], None]) -> None:
        """The server in shape ``name``, which ``make`` makes from Kubeflow 1.11's: kept for
        the tests after this one that start from it too (made again only when a test in
        between started from another shape). Called with no changes of the test's made."""
        assert not self._undo, "use_shape before the test's own changes"
        if self.shape == name:
            return
        self._undo_all(self._shape_undo)
        self.shape = KUBEFLOW_1_11
        make(self)
        self._shape_undo, self._undo = self._undo, []
        self._katib_after_the_crd()
        self.shape = name

    def _katib_after_the_crd(self) -> None:
        """katib-controller started after the trial kinds' CRDs were made; what it replaced is
        what :meth:`restore` leaves."""
        undo = list(self._undo)
        created = [self.crd_created(name) for name in (TFJOB_CRD, TRAINJOB_CRD)
                   if self.read("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)]
        if created:
            self.katib_started(max(created) + KATIB_AFTER_CRD)
        self._undo = undo


def kubeflow_1_11(kubeflow: KubeflowOnTheApiServer) -> None:
    """The shape :func:`ready_cluster` leaves."""


def kubeflow_2603(kubeflow: KubeflowOnTheApiServer) -> None:
    """Kubeflow 26.03's example install: Trainer v2 and JobSet, no Training Operator v1; and
    the README's ``kubectl apply -k manifests/trainer-runtime``."""
    kubeflow.uninstall_crd(TFJOB_CRD)
    kubeflow.install_trainer()
    apply_runtime(kubeflow)


def apply_runtime(kubeflow: KubeflowOnTheApiServer) -> None:
    """``kubectl apply -k manifests/trainer-runtime``."""
    for obj in build("trainer-runtime"):
        kubeflow.put(obj)


def kubeflow_1_11_and_trainer(kubeflow: KubeflowOnTheApiServer) -> None:
    """Kubeflow 1.11 with Trainer v2 installed beside the Training Operator v1, and
    ``kubectl apply -k manifests/trainer-runtime``."""
    kubeflow.install_trainer()
    apply_runtime(kubeflow)


def training_operator(*flags: str) -> dict:
    """The training operator's Deployment as kubeflow/trainer v1.9.2 manifests/base/
    deployment.yaml lines 1-21 has it (``command: [/manager]``), with ``flags`` added the way
    its CI adds them (scripts/gha/setup-training-operator.sh lines 43-44, 50-51: into
    ``command`` after /manager)."""
    labels = {"control-plane": "kubeflow-training-operator"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "training-operator", "namespace": NS, "labels": labels},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "schedulerName": UNSCHEDULED, "containers": [{
                             "name": "training-operator", "command": ["/manager", *flags],
                             "image": "ghcr.io/kubeflow/training-v1/training-operator"}]}}}}


def volcano_queue(name: str, state: str = "Open") -> tuple[dict, dict]:
    """Volcano's Queue ``name`` and the status its scheduler writes (volcano v1.15.1
    pkg/scheduler/cache/cache.go lines 464-519 make the default queue)."""
    return ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": name}, "spec": {"reclaimable": True, "weight": 1}},
            {"state": state})


def kubeflow_1_11_and_volcano(kubeflow: KubeflowOnTheApiServer) -> None:
    """Kubeflow 1.11 with Volcano's CRDs and its default queue Open, the training operator run
    with --gang-scheduler-name=volcano, and manifests/scheduling's PriorityClass (its Kueue
    objects need Kueue)."""
    for name, crd in kubeflow.gang_crds.items():
        if crd["spec"]["group"] == "scheduling.volcano.sh":
            kubeflow.install(name)
    queue, status = volcano_queue("default")
    kubeflow.put(queue)
    kubeflow.write_status(queue, status)
    kubeflow.put(training_operator("--gang-scheduler-name=volcano"))
    for obj in build("scheduling"):
        if obj["kind"] == "PriorityClass":
            kubeflow.put(obj)


SHAPES = {KUBEFLOW_1_11: kubeflow_1_11, "Kubeflow 26.03": kubeflow_2603,
          "Kubeflow 1.11 and Trainer v2": kubeflow_1_11_and_trainer,
          "Kubeflow 1.11 and Volcano": kubeflow_1_11_and_volcano}


def ready_cluster(kubeflow: KubeflowOnTheApiServer) -> None:
    """Standalone KFP in ``kubeflow`` after the README's setup steps, on a Kubeflow 1.11
    install: the claim Bound (to a volume the PV controller binds it to), katib-controller
    running since after the TFJob CRD was made, katib-config and inferenceservice-config as
    Kubeflow installs them (KServe's default mode Serverless)."""
    cluster = kubeflow.cluster
    cluster.ensure_namespace(NS)
    # The claim first: the PV controller binds it while the CRDs are made.
    for obj in build("pvc", namespace=NS):
        cluster.apply(obj, NS)
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": VOLUME},
                    "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteMany"],
                             "hostPath": {"path": str(kubeflow.plane.state_dir / "volume")},
                             "claimRef": {"namespace": NS, "name": "fmnist-data"}}})
    for name in kubeflow.crds:
        kubeflow.install_crd(name)
    for base in ("standalone-rbac", "serving-credentials", "serving-access"):
        for obj in build(base, namespace=NS):
            cluster.apply(obj, NS)
    pod = katib_controller_pod(_time(kubeflow.crd_created() + KATIB_AFTER_CRD))
    pod["spec"]["schedulerName"] = UNSCHEDULED
    cluster.create({k: v for k, v in pod.items() if k != "status"}, namespace=NS)
    kubeflow._katib_after_the_crd()
    for name, data in (("katib-config", {"katib-config.yaml": KATIB_CONFIG}),
                       ("inferenceservice-config",
                        {"deploy": json.dumps({"defaultDeploymentMode": "Serverless"})})):
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": NS}, "data": data})
    kubeflow.until_bound("fmnist-data")


def start(state_dir: Path) -> KubeflowOnTheApiServer:
    """The control plane (no node), ready as :func:`ready_cluster` leaves it."""
    from tests.cluster import start_real_cluster

    plane, cluster = start_real_cluster(state_dir, node=False, crds=False)
    kubeflow = KubeflowOnTheApiServer(plane, cluster)
    try:
        ready_cluster(kubeflow)
    except BaseException:
        plane.stop()
        raise
    return kubeflow
