"""A stand-in for a cluster with KServe: the API server (``tests.standins.apiserver``), KServe's
validating webhook, a controller that plays KServe over Knative (Serverless) or over a
Deployment (Standard), and the cluster's network (who answers at a cluster-local host, and
whether the profile's Istio policy lets a sidecar-less pipeline pod through). It is no
cluster; every rule below cites where it comes from (tests/UPSTREAM.md lists the files).

**Status lags writes.** A write returns the object with its *old* status; the controller acts
on it only after ``lag`` further reads of the InferenceService or its Deployment, and a new
revision (or pod) becomes ready ``ready_after`` reads after that (a controller reconciles after
the API server answered, kserve v0.20.0 ``controller.go`` L421-438).

**Serverless** (Knative; the default of Kubeflow's and KServe's installs, F1.2/F1.3):

* a change of the revision template (the predictor less ``canaryTrafficPercent``, the
  annotations and labels: ``components/predictor.go`` v0.15.2 L99-101, L444-458,
  ``ksvc_reconciler.go`` L149-166) creates revision ``<isvc>-predictor-0000N``;
* the traffic follows ``ksvc_reconciler.go`` v0.15.2 L115-147 (v0.16.0 L132-164), rendered on
  every reconcile from the status' ``latestRolledoutRevision``: ``canaryTrafficPercent`` splits
  only once a revision was rolled out, the latest target is tagged ``latest`` only with the
  annotation ``serving.kserve.io/enable-tag-routing: "true"``, the other always ``prev``;
  ``latestRevision`` targets route to the latest *ready* revision (Knative);
* ``latestRolledoutRevision`` moves when the latest ready revision has 100 %, and back to
  ``previousRolledoutRevision`` when the rolled-out latest revision drops below 100 % while it
  still has all traffic; ``previousRolledoutRevision`` appears from the second rollout on;
  empty fields are left out, never null (``inference_service_status.go`` v0.15.2 L450-481,
  v0.20.0 L575-635, L76);
* ``observedGeneration`` is the Knative Service's generation, which moves only when what KServe
  renders changes (v0.15.2 L510, v0.16.0 L586; F5.1), so it drifts from the InferenceService's:
  an annotation moves it and not the InferenceService's, two writes KServe sees as one move it
  once; url/address are copied only while it is Ready (v0.20.0 L612-618); traffic URLs are the
  external tag URLs (knative-v1.16.2 ``traffic.go`` L96-144);
* only revisions the Route names (any percent) or the latest created one behind a
  ``latestRevision`` target keep pods (``running``; Knative's routingState and reachability).

**Standard** (raw): a Deployment ``<isvc>-predictor`` with the InferenceService's annotations and
labels on its pod template (``deployment_reconciler.go`` v0.15.2 L141-155), its own generation
(an HPA scaling it bumps it: ``hpa_scale``), rolled out by a Deployment controller that also
lags; the InferenceService's ``observedGeneration`` is the Deployment's (``inference_service_
status.go`` v0.20.0 L449-456); status carries only url, address, conditions, deploymentMode
(F2.7); ``canaryTrafficPercent`` is ignored (F3.1). Old pods answer until the new ones are
available (a RollingUpdate; a replacement that never gets ready leaves the old ones serving).

**Deletion is asynchronous.** KServe's reconciler adds the finalizer ``inferenceservice.finalizers``
to an InferenceService it reconciles, and on one whose ``deletionTimestamp`` is set it cleans up,
removes the finalizer and stops (``pkg/controller/v1beta1/inferenceservice/controller.go``
v0.15.2 L162-195). The API server deletes an object with finalizers only by setting
``metadata.deletionTimestamp`` (and a new resourceVersion); it stays readable, terminating,
until the last finalizer is removed, and a create of its name meanwhile is answered 409
AlreadyExists (kubernetes/apiserver v0.33.9 ``pkg/registry/generic/registry/store.go``:
``Delete`` L1128-1217 and ``updateForGracefulDeletionAndFinalizers`` L1041-1124 set it and keep
the object while finalizers remain; the update that empties ``finalizers`` removes it,
``ShouldDeleteDuringUpdate`` L560-586 and ``Update`` L769-773). Here
the controller removes it after ``delete_lag`` reads of the InferenceService; then its
Deployment goes (garbage collection of what it owns). A delete of an InferenceService not yet
reconciled (no finalizer) removes it at once. Each object gets a fresh uid, as a re-created one
does on a cluster.

**Annotations and labels restart the model.** KServe copies the InferenceService's annotations
and labels into the Knative revision template and the Deployment's pod template (above), so each
change of them is a new revision (Serverless) or a rolling restart (Standard): :meth:`KServeStand
In.rollouts` lists, per InferenceService, the model of each revision or pod template rolled, so
a test can assert that a write restarts nothing.

**Modes.** ``status.deploymentMode`` from 0.15.1 (spelled Serverless/RawDeployment up to 0.15,
Knative/Standard from 0.16); an annotation value the version does not know falls back to the
default (``utils.go`` v0.15.2 L176-191, v0.20.0 L224-248).

**Webhook** (``inference_service_validation.go`` v0.15.2 / v0.16.0 / v0.20.0): the name regex
(L43), a deploymentMode annotation that differs from the status is refused (L447-457), the
autoscaler rules picked by the annotations (L210-230, L241-255, L291-329, L406-428), replica
bounds (``component.go`` v0.20.0 L374-388); refusals are 403 ``admission webhook ... denied the
request`` (controller-runtime v0.19.1 ``response.go`` L63-83, kubernetes/apiserver v0.33.9
``statuserror.go`` L28-60).
"""

from __future__ import annotations

import copy
import http.client
import json
import re
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.standins.apiserver import ApiServerStandIn, status_reply
from tests.standins.loopback import LoopbackServer

ISVC_CRD = ("inferenceservice.serving.kserve.io_v1beta1.yaml", "v1beta1")
RUNTIME_CRD = ("servingruntime.serving.kserve.io_v1alpha1.yaml", "v1alpha1")
WEBHOOK = "inferenceservice.kserve-webhook-server.validator"
ISVC_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
TAG_ANNOTATION = "serving.kserve.io/enable-tag-routing"
SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
PROFILE_OPEN_PATHS = ("/healthz", "/metrics", "/wait-for-drain")


@dataclass
class _Revision:
    name: str
    uri: str
    ticks_left: int
    ok: bool
    ready: bool = False
    failed: bool = False


@dataclass
class _State:
    """What the controller remembers about one InferenceService."""

    pending: bool = True
    reads: int = 0
    mode: str = ""
    ksvc_generation: int = 0
    ksvc_spec: str = ""
    canary: int | None = None  # canaryTrafficPercent as KServe last saw it
    tagged: bool = False
    template: str = ""
    revisions: list = field(default_factory=list)
    rolled_out: str = ""
    previous: str = ""
    urls: dict = field(default_factory=dict)
    # Standard: the Deployment controller's view
    served_uri: str = ""  # what the available pods serve
    # Both: the model of every revision (Serverless) or pod template (Standard) rolled
    rollouts: list = field(default_factory=list)
    rollout_ticks: int = 0
    rollout_ok: bool = True


class KServeStandIn(ApiServerStandIn):
    """``version``: the KServe modelled, e.g. (0, 15, 2); ``default_mode``: the
    inferenceservice-config default as spelled there (in ``config_namespace``)."""

    def __init__(self, *, version: tuple = (0, 15, 2), default_mode: str = "Serverless",
                 domain: str = "example.com", kserve_installed: bool = True, lag: int = 1,
                 ready_after: int = 1, config_namespace: str = "kubeflow", delete_lag: int = 2,
                 **kwargs):
        super().__init__(**kwargs)
        self.delete_lag = delete_lag
        self.terminating: dict[tuple[str, str, str], int] = {}  # key -> reads left
        self.uids = 0
        if not kserve_installed:
            self.served -= {("serving.kserve.io", "v1beta1", "inferenceservices"),
                            ("serving.kserve.io", "v1alpha1", "servingruntimes")}
        self.version = version
        self.domain = domain
        self.lag = lag
        self.ready_after = ready_after
        self.honour_tag_routing = True
        self.ready_for = lambda isvc: True  # whether the model in a write comes up
        self.states: dict[tuple[str, str], _State] = {}
        self.put({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "inferenceservice-config", "namespace": config_namespace},
                  "data": {"deploy": json.dumps({"defaultDeploymentMode": default_mode})}})

    # -- names as the version spells them --------------------------------------------------

    def spelled(self, mode: str) -> str:
        new = self.version >= (0, 16, 0)
        return {"Serverless": "Knative" if new else "Serverless",
                "Standard": "Standard" if new else "RawDeployment"}[mode]

    def canonical(self, value: str | None) -> str | None:
        known = ({"Serverless", "Knative", "RawDeployment", "Standard"}
                 if self.version >= (0, 16, 0) else {"Serverless", "RawDeployment"})
        if value not in known:
            return None
        return "Standard" if value in ("RawDeployment", "Standard") else "Serverless"

    def default_mode(self) -> str:
        config = next(obj for (kind, _, name), obj in self.objects.items()
                      if kind == "ConfigMap" and name == "inferenceservice-config")
        value = json.loads(config["data"]["deploy"])["defaultDeploymentMode"]
        return self.canonical(value) or "Serverless"

    # -- the webhook -------------------------------------------------------------------------

    def admit(self, kind: str, body: dict, old: dict | None):
        if kind != "InferenceService":
            return None
        reason = self._validate(body, old)
        if reason is None:
            return None
        return 403, status_reply(403, "Forbidden", f'admission webhook "{WEBHOOK}" denied the '
                                 f"request: {reason}", body["metadata"].get("name", ""),
                                 "inferenceservices", "serving.kserve.io")

    def _validate(self, isvc: dict, old: dict | None) -> str | None:
        annotations = dict((isvc.get("metadata") or {}).get("annotations") or {})
        name = isvc["metadata"].get("name", "")
        if not ISVC_NAME.match(name):
            return (f"the InferenceService \"{name}\" is invalid: a InferenceService name must "
                    "consist of lower case alphanumeric characters or '-', and must start with "
                    "alphabetical character.")
        mode = annotations.get(MODE_ANNOTATION)
        if self.version >= (0, 17, 0) and mode in ("RawDeployment", "Serverless"):
            mode = {"RawDeployment": "Standard", "Serverless": "Knative"}[mode]  # defaulter
            annotations[MODE_ANNOTATION] = mode
            isvc["metadata"]["annotations"] = annotations
        status_mode = ((old or {}).get("status") or {}).get("deploymentMode")
        if old is not None and status_mode and mode is not None and mode != status_mode:
            return (f"update rejected: deploymentMode cannot be changed from '{status_mode}' "
                    f"to '{mode}'")
        klass = annotations.get("serving.kserve.io/autoscalerClass")
        if klass is not None and klass not in ("hpa", "external", "keda", "none"):
            return f"[{klass}] is not a supported autoscaler class type"
        predictor = (isvc.get("spec") or {}).get("predictor") or {}
        lo, hi = predictor.get("minReplicas", 1), predictor.get("maxReplicas", 0)
        if lo < 0:
            return "'MinReplicas' cannot be less than 0"
        if hi < 0:
            return "'MaxReplicas' cannot be less than 0"
        if lo > hi and hi != 0:
            return "'MinReplicas' cannot be greater than MaxReplicas"
        raw = "Standard" if self.version >= (0, 16, 0) else "RawDeployment"
        if mode == raw:
            if klass == "hpa":
                return self._hpa(predictor)
            if klass == "keda" and predictor.get("scaleMetric") is not None:
                return "ScaleMetric is not supported for KEDA"
            return None
        if annotations.get("autoscaling.knative.dev/class") == "hpa.autoscaling.knative.dev":
            return self._hpa(predictor)
        return self._kpa(predictor)

    @staticmethod
    def _hpa(predictor: dict) -> str | None:
        metric = predictor.get("scaleMetric", "cpu")
        if metric not in ("cpu", "memory"):
            return f"[{metric}] is not a supported metric"
        target = predictor.get("scaleTarget")
        if target is not None:
            if (metric == "cpu" and target < 1) or target > 100:  # Go's && binds before ||
                return "the target utilization percentage should be a [1-100] integer"
            if metric == "memory" and target < 1:
                return "the target memory should be greater than 1 MiB"
        return None

    @staticmethod
    def _kpa(predictor: dict) -> str | None:
        if predictor.get("deploymentStrategy") is not None:
            return "customizing deploymentStrategy is only supported for raw deployment mode"
        metric = predictor.get("scaleMetric", "concurrency")
        if metric not in ("concurrency", "rps"):
            return f"[{metric}] is not a supported metric"
        if metric == "rps" and predictor.get("scaleTarget") is not None \
                and predictor["scaleTarget"] < 1:
            return "the target for rps should be greater than 1"
        return None

    # -- the controller ----------------------------------------------------------------------

    # -- finalizers and asynchronous deletion (the module docstring) -------------------------

    FINALIZER = "inferenceservice.finalizers"

    def create(self, resource, namespace: str, body: dict, dry_run: bool = False):
        code, reply = super().create(resource, namespace, body, dry_run=dry_run)
        if code == 201 and not dry_run and resource.kind == "InferenceService":
            self.uids += 1
            stored = self.objects[(resource.kind, namespace, reply["metadata"]["name"])]
            stored["metadata"]["uid"] = reply["metadata"]["uid"] = \
                f"{stored['metadata']['uid']}-{self.uids}"
        return code, reply

    def handle(self, method, resource, namespace: str, name, body, selector: str = "",
               dry_run: bool = False):
        key = (resource.kind, namespace, name)
        if resource.kind == "InferenceService" and name and key in self.objects:
            if method == "GET":
                self._finalize(key)  # may remove it: then the read answers 404
            elif method == "DELETE":
                return self._delete(resource, key)
        return super().handle(method, resource, namespace, name, body, selector, dry_run)

    def _delete(self, resource, key):
        isvc = self.objects[key]
        metadata = isvc["metadata"]
        if not metadata.get("finalizers"):
            return super().handle("DELETE", resource, key[1], key[2], None)
        if not metadata.get("deletionTimestamp"):
            metadata.update(deletionTimestamp="2026-01-01T00:05:00Z",
                            deletionGracePeriodSeconds=0, resourceVersion=self.next_version())
            self.terminating[key] = self.delete_lag
        return 200, copy.deepcopy(isvc)

    def _finalize(self, key) -> None:
        """KServe's reconcile of a terminating InferenceService: after ``delete_lag`` reads its
        finalizer goes, and with the last finalizer the object."""
        if key not in self.terminating:
            return
        self.terminating[key] -= 1
        if self.terminating[key] >= 0:
            return
        del self.terminating[key]
        isvc = self.objects[key]
        finalizers = [f for f in isvc["metadata"].get("finalizers") or []
                      if f != self.FINALIZER]
        if finalizers:  # someone else's finalizer holds it still
            isvc["metadata"].update(finalizers=finalizers, resourceVersion=self.next_version())
            return
        self.objects.pop(key)
        self.after_delete(*key)

    def _add_finalizer(self, isvc: dict) -> None:
        finalizers = isvc["metadata"].setdefault("finalizers", [])
        if self.FINALIZER not in finalizers:
            finalizers.append(self.FINALIZER)
            isvc["metadata"]["resourceVersion"] = self.next_version()

    def rollouts(self, name: str = "fashion-mnist", namespace: str = "kubeflow") -> list[str]:
        """The model of each revision (Serverless) or pod template (Standard) KServe rolled
        for the InferenceService, in order: every entry but a model's first started pods of a
        model already running, i.e. restarted it."""
        return list(self.states[(namespace, name)].rollouts)

    def after_write(self, kind, namespace, name, old):
        if kind == "InferenceService":
            state = self.states.setdefault((namespace, name), _State())
            state.pending, state.reads = True, 0

    def after_delete(self, kind, namespace, name):
        if kind == "InferenceService":
            self.states.pop((namespace, name), None)
            self.objects.pop(("Deployment", namespace, f"{name}-predictor"), None)

    def before_read(self, kind, namespace, name):
        if kind == "InferenceService":
            self.tick(namespace, name)
        elif kind == "Deployment" and name.endswith("-predictor"):
            self.tick(namespace, name[: -len("-predictor")])

    def tick(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        state = self.states.get(key)
        if state is None or ("InferenceService", namespace, name) not in self.objects:
            return
        isvc = self.objects[("InferenceService", namespace, name)]
        if isvc["metadata"].get("deletionTimestamp"):
            return  # "Stop reconciliation as the item is being deleted" (controller.go L195)
        state.reads += 1
        if not state.mode:
            status_mode = (isvc.get("status") or {}).get("deploymentMode")
            annotated = (isvc["metadata"].get("annotations") or {}).get(MODE_ANNOTATION)
            state.mode = (self.canonical(status_mode) or self.canonical(annotated)
                          or self.default_mode())
        acted = state.pending and state.reads > self.lag
        if acted:
            state.pending = False
            self._add_finalizer(isvc)
        if state.mode == "Serverless":
            self._serverless(key, isvc, state, acted)
        else:
            self._standard(key, isvc, state, acted)

    def _progress(self, revision: _Revision) -> None:
        if revision.ready or revision.failed:
            return
        revision.ticks_left -= 1
        if revision.ticks_left < 0:
            revision.ready, revision.failed = revision.ok, not revision.ok

    @staticmethod
    def _ksvc_traffic(state: _State) -> list[dict]:
        """The traffic KServe writes into the Knative Service (ksvc_reconciler.go v0.15.2
        L115-147, v0.16.0 L132-164): a canary split only once a revision was rolled out, the
        latest target tagged ``latest`` with tag routing on, the other always ``prev``."""
        tag = {"tag": "latest"} if state.tagged else {}
        if state.canary is not None and state.rolled_out:
            targets = [{"latestRevision": True, "percent": state.canary, **tag}]
            if state.canary < 100:
                targets.append({"revisionName": state.rolled_out, "latestRevision": False,
                                "percent": 100 - state.canary, "tag": "prev"})
            return targets
        return [{"latestRevision": True, "percent": 100, **tag}]

    @staticmethod
    def _propagate_rollout(state: _State, targets: list[dict], created, ready) -> None:
        """``PropagateStatus``'s bookkeeping of rolled-out revisions
        (inference_service_status.go v0.15.2 L450-481, v0.16.0 L526-557): the latest ready
        revision with 100 % becomes latestRolledoutRevision; if the rolled-out revision is the
        latest one and its latestRevision target drops below 100 % while the revision still
        has all traffic (``canaryTrafficPercent: 0`` on an unchanged template), KServe takes it
        for a rollback and makes previousRolledoutRevision the rolled-out one again."""
        if ready is None:
            return
        shares: dict[str, int] = {}
        for target in targets:
            shares[target["revisionName"]] = shares.get(target["revisionName"], 0) + \
                target["percent"]
        for target in targets:
            if target["revisionName"] != ready.name or not target["latestRevision"]:
                continue
            if state.rolled_out != ready.name:
                if target["percent"] == 100:
                    state.previous, state.rolled_out = state.rolled_out, ready.name
            elif created is ready and target["percent"] < 100 \
                    and shares.get(target["revisionName"]) == 100 and state.previous:
                state.rolled_out = state.previous

    def running(self, name: str = "fashion-mnist", namespace: str = "kubeflow") -> list[str]:
        """The revisions that keep pods: Knative labels every revision its Route names in
        spec or status traffic, at any percent, and the latest created one behind a
        latestRevision target, ``routingState: active`` (knative-v1.16.2 and v1.21.1
        ``pkg/reconciler/labeler/metasync.go`` L35-82); an active revision is Reachable
        (``pkg/reconciler/revision/resources/pa.go`` L54-81), and only a reachable one keeps
        its min-scale (``pkg/apis/autoscaling/v1alpha1/pa_lifecycle.go`` L88-95, which
        KServe sets from minReplicas); any other revision scales to zero."""
        state = self.states[(namespace, name)]
        isvc = self.objects[("InferenceService", namespace, name)]
        traffic = (((isvc.get("status") or {}).get("components") or {}).get("predictor")
                   or {}).get("traffic") or []
        active = {target["revisionName"] for target in traffic}
        if state.revisions and any(t.get("latestRevision") for t in traffic):
            active.add(state.revisions[-1].name)
        return [r.name for r in state.revisions if r.name in active]

    def _serverless(self, key, isvc, state: _State, acted: bool) -> None:
        namespace, name = key
        if acted:  # KServe reconciles the write it has seen (a later one may be unseen yet)
            predictor = dict(isvc["spec"]["predictor"])
            state.canary = predictor.pop("canaryTrafficPercent", None)
            annotations = isvc["metadata"].get("annotations") or {}
            template = json.dumps({"predictor": predictor, "annotations": annotations,
                                   "labels": isvc["metadata"].get("labels") or {}},
                                  sort_keys=True)
            if template != state.template:  # Knative: a new template, a new revision
                state.template = template
                state.revisions.append(_Revision(
                    f"{name}-predictor-{len(state.revisions) + 1:05d}",
                    predictor["model"]["storageUri"], self.ready_after, self.ready_for(isvc)))
                state.rollouts.append(predictor["model"]["storageUri"])
            state.tagged = annotations.get(TAG_ANNOTATION) == "true" and self.honour_tag_routing
        else:
            for revision in state.revisions:
                self._progress(revision)
        if not state.template:
            return
        # KServe renders the Knative Service on every reconcile, and it reconciles whenever
        # the Knative Service's status changes (it Owns it: controller.go v0.15.2 L406,
        # v0.16.0 L560), from the spec and the *status'* latestRolledoutRevision
        # (ksvc_reconciler.go v0.15.2 L106-147, v0.16.0 L123-164); it updates the Knative
        # Service only when that differs (L187-191, L281-291), and each update moves the
        # Knative Service's own generation, which is what status.observedGeneration copies.
        # So one write to the InferenceService can move it twice (a rolled-out revision
        # changes while a canary is set), or not at all (a change KServe renders the same).
        route = self._ksvc_traffic(state)
        ksvc_spec = json.dumps([state.template, route], sort_keys=True)
        if ksvc_spec != state.ksvc_spec:
            state.ksvc_spec = ksvc_spec
            state.ksvc_generation += 1
        created = state.revisions[-1] if state.revisions else None
        ready = next((r for r in reversed(state.revisions) if r.ready), None)
        # Knative's Route: a latestRevision target goes to the latest *ready* revision.
        targets = []
        if ready is not None:
            for target in route:
                resolved = {**target, "revisionName": target.get("revisionName") or ready.name}
                if "tag" in resolved:
                    resolved["url"] = (f"http://{resolved['tag']}-{name}-predictor."
                                       f"{namespace}.{self.domain}")
                targets.append(resolved)
        self._propagate_rollout(state, targets, created, ready)
        config_ready = created is not None and created.ready
        routes_ready = ready is not None
        ksvc_ready = config_ready and routes_ready
        if ksvc_ready:
            state.urls = {
                "url": f"http://{name}-predictor.{namespace}.{self.domain}",
                "address": f"http://{name}-predictor.{namespace}.svc.cluster.local"}

        def condition(kind, ok, failed=False):
            value = "True" if ok else ("False" if failed else "Unknown")
            entry = {"type": kind, "status": value}
            if not ok and created is not None:
                entry.update(reason="RevisionFailed" if failed else "RevisionMissing",
                             message=f"Revision {created.name} "
                                     + ("failed: container not ready" if failed
                                        else "is not ready yet"))
            return entry

        failed = created is not None and created.failed
        ingress = bool(state.urls)
        predictor_status = {
            "latestCreatedRevision": created.name if created else None,
            "latestReadyRevision": ready.name if ready else None,
            "latestRolledoutRevision": state.rolled_out or None,
            "previousRolledoutRevision": state.previous or None,
            "url": state.urls.get("url"),
            "address": {"url": state.urls["address"]} if state.urls else None,
            "traffic": targets or None,
        }
        status = {
            "observedGeneration": state.ksvc_generation or None,
            "url": f"http://{name}.{namespace}.{self.domain}" if ingress else None,
            "address": ({"url": f"http://{name}.{namespace}.svc.cluster.local"}
                        if ingress else None),
            "conditions": [
                condition("IngressReady", ingress),
                condition("LatestDeploymentReady", config_ready, failed),
                condition("PredictorReady", ksvc_ready, failed),
                condition("Ready", ksvc_ready and ingress, failed),
                condition("RoutesReady", routes_ready),
            ],
            "components": {"predictor": predictor_status},
        }
        self._write_isvc_status(key, status, "Serverless")

    def _standard(self, key, isvc, state: _State, acted: bool) -> None:
        namespace, name = key
        deployment_key = ("Deployment", namespace, f"{name}-predictor")
        deployment = self.objects.get(deployment_key)
        if acted:
            wanted = self._deployment(namespace, name, isvc)
            if deployment is None:
                wanted["metadata"].update(generation=1, resourceVersion=self.next_version())
                wanted["status"] = {"observedGeneration": 0}
                self.objects[deployment_key] = deployment = wanted
                state.rollout_ticks, state.rollout_ok = -1, self.ready_for(isvc)
                state.rollouts.append(isvc["spec"]["predictor"]["model"]["storageUri"])
            elif wanted["spec"] != deployment["spec"]:
                template_changed = wanted["spec"]["template"] != deployment["spec"]["template"]
                deployment["spec"] = wanted["spec"]
                deployment["metadata"]["generation"] += 1
                deployment["metadata"]["resourceVersion"] = self.next_version()
                if template_changed:  # a rolling restart, whatever changed in the template
                    state.rollout_ticks, state.rollout_ok = -1, self.ready_for(isvc)
                    state.rollouts.append(isvc["spec"]["predictor"]["model"]["storageUri"])
            return self._standard_status(key, isvc, state, deployment)
        if deployment is None:
            return None
        metadata, status = deployment["metadata"], deployment["status"]
        replicas = deployment["spec"]["replicas"]
        if status.get("observedGeneration", 0) < metadata["generation"]:
            status["observedGeneration"] = metadata["generation"]  # the controller catches up
            if state.rollout_ticks == -1:
                state.rollout_ticks = self.ready_after
                status.update(updatedReplicas=0, replicas=status.get("availableReplicas", 0))
        elif state.rollout_ticks > 0:
            state.rollout_ticks -= 1
        elif state.rollout_ticks == 0:
            state.rollout_ticks = -2
            if state.rollout_ok:
                status.update(replicas=replicas, updatedReplicas=replicas,
                              availableReplicas=replicas, readyReplicas=replicas)
                state.served_uri = deployment["spec"]["template"]["metadata"]["annotations"][
                    SOURCE_URI_ANNOTATION]
            else:  # the surge pod never gets ready; the old ones keep running
                status.update(replicas=status.get("availableReplicas", 0) + 1,
                              updatedReplicas=1)
        available = status.get("availableReplicas", 0)
        done = (status.get("updatedReplicas") == replicas and available >= replicas)
        status["conditions"] = [
            {"type": "Available", "status": "True" if available >= replicas else "False",
             "reason": "MinimumReplicasAvailable" if available >= replicas else
             "MinimumReplicasUnavailable"},
            {"type": "Progressing", "status": "True",
             "reason": "NewReplicaSetAvailable" if done else "ReplicaSetUpdated"},
        ]
        return self._standard_status(key, isvc, state, deployment)

    def _deployment(self, namespace: str, name: str, isvc: dict) -> dict:
        predictor = isvc["spec"]["predictor"]
        model = predictor["model"]
        labels = {**(isvc["metadata"].get("labels") or {}),
                  "serving.kserve.io/inferenceservice": name, "component": "predictor",
                  "app": f"isvc.{name}-predictor"}
        annotations = {**(isvc["metadata"].get("annotations") or {}),
                       SOURCE_URI_ANNOTATION: model["storageUri"]}
        probe = model.get("readinessProbe") or {"tcpSocket": {"port": 8080}}
        return {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"{name}-predictor", "namespace": namespace,
                         "labels": labels, "uid": f"uid-deployment-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "replicas": max(int(predictor.get("minReplicas", 1)), 1),
                "selector": {"matchLabels": {"app": f"isvc.{name}-predictor"}},
                "strategy": predictor.get("deploymentStrategy") or {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
                "template": {"metadata": {"labels": labels, "annotations": annotations},
                             "spec": {"containers": [{"name": "kserve-container",
                                                      "readinessProbe": probe}]}},
            },
        }

    def _standard_status(self, key, isvc, state: _State, deployment: dict) -> None:
        namespace, name = key
        status = deployment.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        available = conditions.get("Available", {}).get("status") == "True"
        progressed = conditions.get("Progressing", {}).get("reason") == "NewReplicaSetAvailable"
        ready = available or progressed
        value = "True" if ready else "Unknown"
        self._write_isvc_status(key, {
            "observedGeneration": status.get("observedGeneration") or None,
            "url": f"http://{name}-{namespace}.{self.domain}",
            "address": {"url": f"http://{name}-predictor.{namespace}.svc.cluster.local"},
            "conditions": [{"type": "IngressReady", "status": "True"},
                           {"type": "PredictorReady", "status": value},
                           {"type": "Ready", "status": value}],
            "components": {"predictor": {
                "url": f"http://{name}-predictor-{namespace}.{self.domain}" if ready else None}},
        }, "Standard")

    def _write_isvc_status(self, key, status: dict, mode: str) -> None:
        if self.version >= (0, 15, 1):
            status["deploymentMode"] = self.spelled(mode)
        object_key = ("InferenceService", *key)
        if self.objects[object_key].get("status") != status:
            self.write_status(object_key, status)

    def hpa_scale(self, name: str, replicas: int, namespace: str = "kubeflow") -> None:
        """The HPA scales the Deployment: its generation moves, the InferenceService's not."""
        deployment = self.objects[("Deployment", namespace, f"{name}-predictor")]
        deployment["spec"]["replicas"] = replicas
        deployment["metadata"]["generation"] += 1

    # -- the cluster's network -----------------------------------------------------------------

    def answering(self, url: str, path: str = "/v1/models/x:predict") -> tuple[str | None, str]:
        """Which InferenceService and model answer ``url`` from a pipeline pod (no sidecar):
        ``(storage_uri, isvc_name)``, or ``(None, why)`` when the request fails."""
        host = urlsplit(url).hostname or ""
        match = re.match(r"^(?:(latest|prev)-)?([a-z0-9-]+?)(-predictor)?\.([a-z0-9-]+)"
                         r"\.svc\.cluster\.local$", host)
        if not match:
            return None, f"cannot resolve {host} from inside the cluster"
        tag, name, namespace = match[1], match[2], match[4]
        with self.lock:
            isvc = self.objects.get(("InferenceService", namespace, name))
            state = self.states.get((namespace, name))
            if isvc is None or state is None:
                return None, f"no Service {host}"
            denied = self._istio(isvc, path)
            if denied:
                return None, denied
            if state.mode == "Standard":
                return (state.served_uri or None), name if state.served_uri else \
                    "503 no ready endpoints"
            targets = (((isvc.get("status") or {}).get("components") or {})
                       .get("predictor") or {}).get("traffic") or []
            if tag:
                target = next((t for t in targets if t.get("tag") == tag), None)
            else:  # a split: the stable share answers most requests
                target = max(targets, key=lambda t: t["percent"], default=None)
            if target is None:
                return None, f"no route for {host}"
            revision = next(r for r in state.revisions if r.name == target["revisionName"])
            return revision.uri, name

    def _istio(self, isvc: dict, path: str) -> str | None:
        """The profile's ``ns-owner-access-istio`` admits a sidecar-less caller only on the
        health paths (kubeflow/kubeflow v1.10.0 ``profile_controller.go`` L432-503); any
        other request needs an ALLOW AuthorizationPolicy in the namespace whose selector
        matches the predictor pod and whose rule matches the path (Istio's path match: exact,
        ``prefix*``, ``*suffix``, ``*``; istio/api ``security/v1beta1/authorization.proto``)."""
        if not self.istio:
            return None
        if path in PROFILE_OPEN_PATHS:
            return None
        namespace = isvc["metadata"]["namespace"]
        labels = {**(isvc["metadata"].get("labels") or {}), "component": "predictor",
                  "serving.kserve.io/inferenceservice": isvc["metadata"]["name"]}
        for (kind, ns, _), policy in self.objects.items():
            if kind != "AuthorizationPolicy" or ns != namespace:
                continue
            spec = policy.get("spec") or {}
            if spec.get("action", "ALLOW") != "ALLOW":
                continue
            wanted = (spec.get("selector") or {}).get("matchLabels") or {}
            if any(labels.get(k) != v for k, v in wanted.items()):
                continue
            for rule in spec.get("rules") or []:
                if rule.get("from"):
                    continue  # a pod without a sidecar has no peer identity
                operations = [t.get("operation") or {} for t in rule.get("to") or [{}]]
                if any(_path_match(op.get("paths"), path) and
                       ("POST" in op.get("methods", ["POST"])) for op in operations):
                    return None
        return "403 RBAC: access denied"

    istio = False  # True: enforce the profile's Istio policies
    backend = None  # (isvc_name, storage_uri) -> the base URL of a server running that model

    def network(self) -> ClusterNetwork:
        """The cluster's network as an HTTP proxy on loopback: point ``HTTP_PROXY`` at it and
        requests to ``*.svc.cluster.local`` reach whichever model :meth:`answering` names, on
        the server ``backend(isvc_name, storage_uri)`` gives."""
        return ClusterNetwork(self)

    # -- for the tests ------------------------------------------------------------------------

    def kserve_client(self, namespace: str = "kubeflow"):
        """A ``kserve.KServeClient`` whose API objects talk to this stand-in."""
        from kserve import KServeClient
        from kubernetes import client

        api_client = self.api_client(namespace)
        kserve_client = KServeClient(config_file=str(self.kubeconfig(namespace)),
                                     client_configuration=client.Configuration(),
                                     persist_config=False)
        kserve_client.api_instance = client.CustomObjectsApi(api_client)
        kserve_client.core_api = client.CoreV1Api(api_client)
        kserve_client.app_api = client.AppsV1Api(api_client)
        return kserve_client

    def isvc_writes(self) -> list[tuple[str, dict]]:
        """The POST and PUT bodies sent for InferenceServices, in order."""
        return [(method, body) for method, path, body in self.calls
                if method in ("POST", "PUT") and "/inferenceservices" in path]

    def runtime_writes(self) -> list[tuple[str, dict]]:
        return [(method, body) for method, path, body in self.calls
                if method in ("POST", "PUT") and "/servingruntimes" in path]

    def isvc(self, name: str = "fashion-mnist", namespace: str = "kubeflow") -> dict:
        return self.get("InferenceService", name, namespace)


class ClusterNetwork(LoopbackServer):
    """A forward proxy: absolute-form requests for cluster-local hosts are routed as the
    stand-in's routing says (403 ``RBAC: access denied`` from Istio, 503 with no endpoint).
    First, the connection from the pipeline pod (in ``source_namespace``, default: the
    InferenceService's; labels ``source_labels``) to the pod the host leads to must be admitted
    by the NetworkPolicies stored in the stand-in (``tests.standins.network``); a connection
    they drop gets no answer (held ``drop_seconds``, then closed), as a dropped SYN times out."""

    source_namespace: str | None = None
    source_labels: dict = {}
    drop_seconds = 0.2

    def dropped_by(self, standin: KServeStandIn, url: str) -> str | None:
        """The isolating NetworkPolicies when they drop this connection, else None."""
        from tests.standins import network as policies

        match = re.match(r"^(?:(?:latest|prev)-)?([a-z0-9-]+?)(?:-predictor)?\.([a-z0-9-]+)"
                         r"\.svc\.cluster\.local$", urlsplit(url).hostname or "")
        if not match:
            return None
        name, namespace = match[1], match[2]
        with standin.lock:
            state = standin.states.get((namespace, name))
            mode = state.mode if state is not None else ""
            target = policies.destination(mode, namespace, name)
            source = (self.source_namespace or namespace, dict(self.source_labels))
            admitted, decided = policies.admits(standin.objects, source, target)
        return None if admitted else decided

    def __init__(self, standin: KServeStandIn):
        network = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                parts = urlsplit(self.path)
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                if network.dropped_by(standin, self.path):
                    network.requests.append((self.command, self.path, None))
                    network.dropped.append(self.path)
                    time.sleep(network.drop_seconds)
                    self.close_connection = True
                    return None
                uri, who = standin.answering(self.path, parts.path)
                network.requests.append((self.command, self.path, uri))
                if uri is None:
                    code = 403 if who.startswith("403") else 503
                    return self._reply(code, (who[4:] if code == 403 else who).encode())
                target = urlsplit(standin.backend(who, uri))
                connection = http.client.HTTPConnection(target.hostname, target.port,
                                                        timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "proxy-connection", "connection")}
                connection.request(self.command, path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection",
                                           "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            def _reply(self, code: int, data: bytes):
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

        self.requests: list[tuple[str, str, str | None]] = []
        self.dropped: list[str] = []  # the URLs whose connections NetworkPolicies dropped
        self._serve(Handler)


def _path_match(patterns: list | None, path: str) -> bool:
    if not patterns:
        return True
    for pattern in patterns:
        if pattern == "*" or pattern == path:
            return True
        if pattern.endswith("*") and path.startswith(pattern[:-1]):
            return True
        if pattern.startswith("*") and path.endswith(pattern[1:]):
            return True
    return False


def copy_of(obj: dict) -> dict:
    return copy.deepcopy(obj)
