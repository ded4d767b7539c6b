"""``fmnist-kfp preflight``: is this cluster ready for a first run? Each check prints what it
found and, for a miss, the fix; the exit code says whether every required piece is there.

It asks, with the user's kubeconfig (in a pod without one, such as a Kubeflow notebook, the
pod's in-cluster configuration: :func:`kubernetes_api`) and the KFP endpoint:

* the KFP backend's version (at least 2.14.0: ``kfp_client.check_backend``);
* the APIs the pipeline creates objects of, with their served versions, from API discovery
  (``/apis/<group>/<version>``, readable by every authenticated user): TFJob
  (``kubeflow.org/v1``; Kubeflow 1.11's example install ships Trainer v2 instead), Experiment
  and Trial (``kubeflow.org/v1beta1``), InferenceService (``serving.kserve.io/v1beta1``) and
  ServingRuntime (``serving.kserve.io/v1alpha1``);
* whether Katib watches TFJobs (when both are served): katib-controller builds its watches
  once, at start, and skips the TFJob watch if the CRD did not exist then, so trials would stay
  Running for hours (:func:`check_katib_watch`);
* KServe's default deployment mode (inferenceservice-config, for information);
* the shared ReadWriteMany claim, the compile-time credentials Secret (when one is named), the
  serving ServiceAccount and its S3 Secret (``fmnist_kfp.serving.deploy.credentials``), and the
  Istio policy that lets pipeline pods reach the predictors (when Istio is installed), and
  on Kubeflow 26.03, whose NetworkPolicies isolate istio-system, the NetworkPolicy that lets
  them reach the cluster-local gateway (:func:`check_network_policy`);
* every permission the pipeline's steps use, as SelfSubjectAccessReviews made *as* the
  pipeline's ServiceAccount (impersonation; Kubeflow's kubeflow-edit lets a profile's users
  impersonate its ServiceAccounts): ``pipeline-runner`` on standalone KFP, the profile's
  ``default-editor`` on multi-user Kubeflow;
* with ``--scheduling`` (the run's ``kubernetes.scheduling``), what each of its keys needs on
  the cluster (:func:`check_scheduling`): for ``queue`` Kueue, the LocalQueue, and that Kueue
  manages TFJobs (a server-side dry run of a labelled TFJob comes back suspended); for
  ``priority_class`` the PriorityClass (and, with a queue, Kueue's WorkloadPriorityClass); for
  ``gang`` the scheduler's PodGroup API, Volcano's queue, and the training operator's
  ``--gang-scheduler-name``. Each is silently ignored, or leaves the job waiting forever, when
  missing (docs/scheduling.md).

upstream: docs/upstream.md#katib, #kubeflow-manifests; docs/scheduling.md
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from fmnist_kfp.errors import RemoteError, UserInputError, connection_problem
from fmnist_kfp.kubernetes.workload import GROUP as WORKLOAD_GROUP
from fmnist_kfp.settings.scheduling import KUEUE_QUEUE_LABEL, SchedulingSettings

ISTIO_POLICY = "fmnist-serving-in-cluster"
# Kubeflow 26.03's NetworkPolicy that admits to istio-system pods only istio-system's
# (kubeflow/manifests 26.03 common/istio/istio-namespace/base/default-allow-same-namespace.yaml
# lines 1-12, new in 26.03: commit fcd884f71, #3342); where it exists, pipeline pods reach the
# cluster-local gateway (every Serverless predictor's address) only through ours.
GATEWAY_NAMESPACE = "istio-system"
KUBEFLOW_GATEWAY_POLICY = "default-allow-same-namespace-istio-system"
NETWORK_POLICY = "fmnist-pipelines-to-local-gateway"  # manifests/serving-network
SETUP = "manifests/"
# An API server that does not answer costs seconds: a 5 s connect timeout, one retry.
CONNECT_TIMEOUT_SECONDS = 5.0
RETRIES = 1

# (group, version, plural, what, fix)
APIS = (
    ("kubeflow.org", "v1", "tfjobs", "TFJob (Training Operator v1)",
     "install Training Operator v1: Kubeflow 1.11's example install ships Trainer v2 (no "
     "TFJob); apply kubeflow/manifests applications/training-operator/upstream/overlays/kubeflow"
     " (kubectl apply --server-side -k \"github.com/kubeflow/manifests/applications/"
     "training-operator/upstream/overlays/kubeflow?ref=v1.11.0\"), then, with Katib already "
     "installed, restart katib-controller so that it watches TFJobs (kubectl rollout restart "
     "deployment/katib-controller -n kubeflow)"),
    ("kubeflow.org", "v1beta1", "experiments", "Katib Experiment",
     "install Katib (applications/katib in kubeflow/manifests); only needed with --tune"),
    ("kubeflow.org", "v1beta1", "trials", "Katib Trial",
     "install Katib (applications/katib in kubeflow/manifests); only needed with --tune"),
    ("serving.kserve.io", "v1beta1", "inferenceservices", "KServe InferenceService",
     "install KServe 0.14 or newer (applications/kserve in kubeflow/manifests)"),
    ("serving.kserve.io", "v1alpha1", "servingruntimes", "KServe ServingRuntime",
     "install KServe 0.14 or newer (applications/kserve in kubeflow/manifests)"),
)

# Katib's controller (kubeflow/katib v0.19.0 manifests/v1beta1/components/controller/
# controller.yaml lines 2-26: Deployment katib-controller in kubeflow, pods labelled
# katib.kubeflow.org/component=controller, container katib-controller; the same in
# kubeflow/manifests v1.11.0 and 26.03 applications/katib/upstream/components/controller/).
KATIB_NAMESPACE = "kubeflow"
KATIB_CONTROLLER = "katib-controller"
KATIB_CONTROLLER_SELECTOR = "katib.kubeflow.org/component=controller"
KATIB_CONFIG = "katib-config"  # the ConfigMap, its key katib-config.yaml (controller.yaml 57-77)
TFJOB_CRD = "tfjobs.kubeflow.org"
TFJOB_TRIAL_RESOURCE = ("TFJob", "v1", "kubeflow.org")  # Kind.version.group in trialResources
RESTART_KATIB = f"kubectl rollout restart deployment/{KATIB_CONTROLLER} -n {KATIB_NAMESPACE}"

# (verb, group, resource, subresource, what for): what the steps' code calls.
PERMISSIONS = (
    ("create", "kubeflow.org", "tfjobs", "", "train: create the TFJob"),
    ("get", "kubeflow.org", "tfjobs", "", "train: follow the TFJob; tune: examine a "
                                          "stalled trial's"),
    ("delete", "kubeflow.org", "tfjobs", "", "train: delete it on SIGTERM or failure"),
    ("list", "", "pods", "", "train: find the chief pod"),
    ("get", "", "pods", "log", "train: read the chief's log"),
    ("create", "kubeflow.org", "experiments", "", "tune: create the Experiment"),
    ("get", "kubeflow.org", "experiments", "", "tune: follow the Experiment"),
    ("delete", "kubeflow.org", "experiments", "", "tune: delete it on SIGTERM"),
    ("list", "kubeflow.org", "trials", "", "tune: report the trials"),
    ("get", "serving.kserve.io", "inferenceservices", "", "deploy: read the service"),
    ("create", "serving.kserve.io", "inferenceservices", "", "deploy: create it (and the "
                                                               "Standard-mode candidate)"),
    ("update", "serving.kserve.io", "inferenceservices", "", "deploy: canary, promote, "
                                                               "roll back"),
    ("delete", "serving.kserve.io", "inferenceservices", "", "deploy: remove the candidate"),
    ("get", "serving.kserve.io", "servingruntimes", "", "deploy: read our runtime"),
    ("create", "serving.kserve.io", "servingruntimes", "", "deploy: create our runtime"),
    ("get", "apps", "deployments", "", "deploy: follow a Standard-mode rollout"),
    ("get", "", "serviceaccounts", "", "deploy: check the storage credentials"),
    ("get", "", "secrets", "", "deploy: check the storage credentials"),
    ("create", "tensorboard.kubeflow.org", "tensorboards", "", "train: create the run's "
                                                               "Tensorboard"),
    ("get", "tensorboard.kubeflow.org", "tensorboards", "", "train: re-attach to it on a "
                                                            "retry"),
    ("create", "batch", "jobs", "", "batch-predict: create the Indexed Job"),
    ("get", "batch", "jobs", "status", "batch-predict: follow the Job"),
    ("delete", "batch", "jobs", "", "batch-predict: delete it on SIGTERM or failure"),
    ("get", "", "configmaps", "", "serve_early: read the claim (<name>-serve-early)"),
    ("create", "", "configmaps", "", "serve_early: make the claim"),
    ("update", "", "configmaps", "", "serve_early: win the claim (compare-and-swap)"),
)
# What a step reads only when it can, going on without it (a 403 is not a failure), so
# PERMISSIONS leaves it out: Kueue's Workloads (why a queued job waits: kubernetes/workload.py).
# (KServe's inferenceservice-config, read for the default mode in KServe's namespace, is such a
# read too, but configmaps are read in the run's namespace anyway: the serve_early claim.)
OPTIONAL_READS = (
    ("list", "kueue.x-k8s.io", "workloads", ""),
)


# -- scheduling (kubernetes.scheduling: docs/scheduling.md) --------------------------------------

SCHEDULING_SETUP = f"{SETUP}scheduling"
# Kueue (kubernetes-sigs/kueue v0.19.2): v1beta2 stored since v0.16, v1beta1 still served
# (deprecated) and the only one before v0.15 (tests/crds/kueue.x-k8s.io_localqueues.yaml).
KUEUE_GROUP = WORKLOAD_GROUP
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
# site/content/en/docs/getting-started/installation.md line 59 (the release's manifests.yaml);
# site/content/en/docs/tasks/run/kubeflow/tfjobs.md line 27 (enable the TFJob integration).
KUEUE_INSTALL = ("install Kueue (kubectl apply --server-side -f https://github.com/"
                 "kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml; Kubeflow "
                 "does not ship it), with kubeflow.org/tfjob in integrations.frameworks")
# The TFJob integration is off by default since v0.19.0: config/components/manager/
# controller_manager_config.yaml line 55 (commented out); the ConfigMap is manager-config with
# namePrefix kueue- in kueue-system (config/components/manager/kustomization.yaml lines 7-10,
# config/default/kustomization.yaml lines 2 and 9), the Deployment kueue-controller-manager.
KUEUE_ENABLE_TFJOB = (
    "enable kubeflow.org/tfjob in integrations.frameworks of ConfigMap kueue-manager-config in "
    "kueue-system (off by default since Kueue v0.19), and restart kueue-controller-manager "
    "(kubectl rollout restart deployment/kueue-controller-manager -n kueue-system)")
# The TFJob sent as a server-side dry run (never stored): the least the TFJob CRD and the
# training operator's webhook accept (kubeflow/trainer v1.9.2 pkg/webhooks/tensorflow/
# tfjob_webhook.go lines 73-127: a container named tensorflow, with an image).
QUEUE_PROBE = "fmnist-preflight-queue-check"
PROBE_IMAGE = "python:3.11.14-slim-bookworm"  # never pulled
# Gang schedulers: the PodGroup API the training operator creates, and the install (kubeflow/
# trainer v1.9.2 cmd/training-operator.v1/main.go lines 191-202 and 260-269: it exits at start
# when the CRD of its --gang-scheduler-name is missing; its CI installs either scheduler as
# below: scripts/gha/setup-training-operator.sh lines 37-39 and 54).
GANG_APIS = {
    "volcano": ("scheduling.volcano.sh", "v1beta1", "Volcano",
                "install Volcano (kubectl apply -f https://raw.githubusercontent.com/volcano-sh/"
                "volcano/v1.15.1/installer/volcano-development.yaml)"),
    "scheduler-plugins": ("scheduling.x-k8s.io", "v1alpha1", "scheduler-plugins",
                          "install scheduler-plugins as a second scheduler (its Helm chart "
                          "manifests/install/charts/as-a-second-scheduler of kubernetes-sigs/"
                          "scheduler-plugins v0.34.7, in namespace scheduler-plugins)"),
}
VOLCANO_DEFAULT_QUEUE = "default"  # volcano v1.15.1 scheduling/v1beta1/types.go lines 340-343
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # .../v1beta1/labels.go 46-48
# The training operator as kubeflow/manifests installs it: Deployment training-operator
# (kubeflow/trainer v1.9.2 manifests/base/deployment.yaml line 4) in kubeflow, where its CI
# patches the flag in (scripts/gha/setup-training-operator.sh lines 43-44 and 50-51); run as
# `/manager` with no flags (deployment.yaml lines 20-21), i.e. without gang scheduling.
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_DEPLOYMENT = "training-operator"
_GANG_FLAG = re.compile(r"^--?gang-scheduler-name(?:=(.*))?$")


def _gang_flag_fix(gang: str) -> str:
    value = "volcano" if gang == "volcano" else "scheduler-plugins"
    return (f"run the training operator with --gang-scheduler-name={value} (as its CI does: "
            f"kubectl patch -n {OPERATOR_NAMESPACE} deployment {OPERATOR_DEPLOYMENT} "
            "--type=json -p='[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/"
            f"command/1\", \"value\": \"--gang-scheduler-name={value}\"}}]')")


@dataclass
class Row:
    """One check: ``ok`` True (fine), False (a miss: not ready) or None (information)."""

    check: str
    ok: bool | None
    found: str
    fix: str = ""


@dataclass
class Cluster:
    """Where the pipeline runs and what it is compiled against."""

    namespace: str
    runner_service_account: str
    pvc: str
    credentials_secret: str
    serving_namespace: str
    serving_service_account: str
    multi_user: bool
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)


def _call(api_client, path: str, method: str = "GET", body=None, headers=None):
    return api_client.call_api(path, method, body=body, header_params=headers or {},
                               response_type="object", auth_settings=["BearerToken"],
                               _return_http_data_only=True, _preload_content=True,
                               _request_timeout=(CONNECT_TIMEOUT_SECONDS, 30))


def _status(error) -> int | None:
    return getattr(error, "status", None)


def check_kfp(endpoint) -> Row:
    from fmnist_kfp.kfp_client import MIN_BACKEND, check_backend

    minimum = ".".join(map(str, MIN_BACKEND))
    try:
        return Row("KFP backend", True, check_backend(endpoint))
    except RemoteError as error:  # its message says what to check
        return Row("KFP backend", False, str(error))
    except UserInputError as error:
        return Row("KFP backend", False, str(error),
                   f"KFP {minimum} or newer (Kubeflow 1.11), or --kfp-backend-version")


def check_api_server(api_client) -> Row | None:
    """None when the Kubernetes API server answers with these credentials; else the row that
    says why not, in place of every other check (each would only fail the same way)."""
    server = api_client.configuration.host
    what = "Kubernetes API server"
    try:
        _call(api_client, "/version")
    except Exception as error:
        problem = connection_problem(error)
        status = _status(error)
        if problem:
            return Row(what, False, f"cannot reach {server}: {problem}",
                       "check the kubeconfig's cluster (--kubeconfig, --context): is it up, "
                       "does it need a VPN or a tunnel?")
        if status == 401:
            return Row(what, False, f"{server} refused the kubeconfig's credentials (HTTP 401)",
                       "log in again, or pick another --context")
        if status is None:  # no answer at all: TLS, a proxy, a reset
            return Row(what, False, f"cannot talk to {server}: {type(error).__name__}: {error}",
                       "check the kubeconfig's server address and certificate")
    return None  # it answered (a 403 or 404 on /version still means it is there)


def check_apis(api_client) -> list[Row]:
    rows = []
    for group, version, plural, what, fix in APIS:
        try:
            listing = _call(api_client, f"/apis/{group}/{version}")
            served = plural in {resource.get("name") for resource in
                                (listing or {}).get("resources") or []}
        except Exception as error:
            if _status(error) != 404:
                rows.append(Row(what, None, f"cannot ask the API server: {error}"))
                continue
            served = False
        if served:
            rows.append(Row(what, True, f"{plural}.{group}, served at {version}"))
        else:
            rows.append(Row(what, False, f"{plural}.{group}/{version} is not served", fix))
    return rows


def _time(value) -> datetime | None:
    """An API timestamp (RFC 3339 text, or the client's datetime) as an aware datetime."""
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    try:  # Python 3.10's fromisoformat takes no "Z"
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _trial_resources(config_text: str) -> list[str]:
    """katib-config's ``init.controller.trialResources``; Katib's default when it names none
    (kubeflow/katib v0.19.0 pkg/apis/config/v1beta1/defaults.go lines 50-51 and 91-94)."""
    import yaml

    config = yaml.safe_load(config_text or "") or {}
    controller = ((config.get("init") or {}).get("controller") or {}) if isinstance(
        config, dict) else {}
    return list(controller.get("trialResources") or []) or ["Job.v1.batch"]


def _watches_tfjobs(resources: list[str]) -> bool:
    """Whether ``Kind.version.group`` entries name Training Operator v1's TFJob (Katib parses
    them with schema.ParseKindArg: pkg/util/v1beta1/katibconfig/config.go lines 44-58)."""
    return any(tuple(str(entry).split(".", 2)) == TFJOB_TRIAL_RESOURCE for entry in resources)


def check_katib_watch(api_client, core) -> Row:
    """Whether katib-controller watches TFJobs, as kubeflow/katib v0.19.0 decides it: once, at
    start, for each kind in katib-config's ``trialResources`` (cmd/katib-controller/v1beta1/
    main.go lines 59-85) whose CRD the API server maps *then*; a kind without a mapping is
    skipped with only a log line asking for a restart
    (pkg/controller.v1beta1/trial/trial_controller.go lines 103-127). Without the watch a
    trial's TFJob runs to its end unnoticed and the trial stays Running (for hours). Kubeflow
    1.11's and 26.03's example installs leave Training Operator v1 out (kubeflow/manifests
    v1.11.0 example/kustomization.yaml lines 93-94), so it is often installed after Katib.

    Compared: the TFJob CRD's ``creationTimestamp`` against the start of each running
    katib-controller container (its pod's start when the container's is not reported). A read
    this user may not make (RBAC) makes the row a note, never a miss."""
    what = "Katib watches TFJobs"
    fix = (f"{RESTART_KATIB} (katib-controller then watches the TFJob CRD; install Training "
           "Operator v1 before Katib to avoid this)")
    try:
        crd = _call(api_client, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                f"{TFJOB_CRD}")
    except Exception as error:
        return Row(what, None, f"could not check: cannot read the CRD {TFJOB_CRD} "
                               f"({_reason(error)})", f"if Training Operator v1 was installed "
                                                     f"after Katib: {RESTART_KATIB}")
    created = _time(((crd or {}).get("metadata") or {}).get("creationTimestamp"))
    try:
        pods = core.list_namespaced_pod(KATIB_NAMESPACE, label_selector=KATIB_CONTROLLER_SELECTOR,
                                        _request_timeout=30).items
    except Exception as error:
        return Row(what, None, f"could not check: cannot list pods in {KATIB_NAMESPACE} "
                               f"({_reason(error)})", f"if Training Operator v1 was installed "
                                                     f"after Katib: {RESTART_KATIB}")
    try:
        config = core.read_namespaced_config_map(KATIB_CONFIG, KATIB_NAMESPACE,
                                                 _request_timeout=30)
        resources = _trial_resources((config.data or {}).get("katib-config.yaml", ""))
    except Exception:  # unreadable: the CRD's age is still worth comparing
        resources = None
    if resources is not None and not _watches_tfjobs(resources):
        return Row(what, False, f"katib-config's trialResources {resources} lack "
                                "TFJob.v1.kubeflow.org: katib-controller never watches TFJobs",
                   f"add TFJob.v1.kubeflow.org to init.controller.trialResources in the "
                   f"ConfigMap {KATIB_NAMESPACE}/{KATIB_CONFIG}, then {RESTART_KATIB}")
    started = []
    for pod in pods:
        status = pod.status
        if status is None or status.phase != "Running" or pod.metadata.deletion_timestamp:
            continue
        container = next((c for c in status.container_statuses or []
                          if c.name == KATIB_CONTROLLER), None)
        running = container.state.running if container and container.state else None
        start = _time(running.started_at if running else None) or _time(status.start_time)
        if start is not None:
            started.append((start, pod.metadata.name))
    if created is None or not started:
        found = ("no running katib-controller pod in " + KATIB_NAMESPACE if not started
                 else f"no creationTimestamp on the CRD {TFJOB_CRD}")
        return Row(what, None, f"could not check: {found}",
                   "Katib's Experiments need katib-controller running (kubectl get pods -n "
                   f"{KATIB_NAMESPACE} -l {KATIB_CONTROLLER_SELECTOR})")
    before = [(start, name) for start, name in sorted(started) if start < created]
    if before:
        start, name = before[0]
        return Row(what, False, f"{KATIB_CONTROLLER} pod {name} started {_utc(start)}, before "
                                f"the TFJob CRD was created ({_utc(created)}): it is not "
                                "watching TFJobs, and tuning trials would stay Running for "
                                "hours", fix)
    if any(start == created for start, _ in started):
        return Row(what, None, f"{KATIB_CONTROLLER} started in the second the TFJob CRD was "
                               f"created ({_utc(created)}): too close to tell", fix)
    start = min(start for start, _ in started)
    return Row(what, True, f"{KATIB_CONTROLLER} started {_utc(start)}, after the TFJob CRD "
                           f"({_utc(created)})")


def _utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _reason(error) -> str:
    status = _status(error)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '') or ''}".rstrip()
    return f"{type(error).__name__}: {error}"


def check_mode(api) -> Row:
    from fmnist_kfp.serving.deploy.kserve_deployer import cluster_default_mode

    value = cluster_default_mode(api, log=lambda line: None)
    if value is None:
        return Row("KServe default mode", None, "unknown (inferenceservice-config not "
                                                "readable): the deploy step assumes Serverless",
                   "set serving.deployment_mode if the cluster defaults to raw mode")
    return Row("KServe default mode", None, f"{value} (inferenceservice-config)")


def check_pvc(core, cluster: Cluster) -> Row:
    fix = (f"kubectl apply -k {SETUP}pvc -n {cluster.namespace} (a ReadWriteMany claim named "
           f"as FMNIST_PVC_NAME at compile time)")
    what = f"PVC {cluster.namespace}/{cluster.pvc}"
    try:
        claim = core.read_namespaced_persistent_volume_claim(cluster.pvc, cluster.namespace,
                                                              _request_timeout=30)
    except Exception as error:
        if _status(error) == 404:
            return Row(what, False, "missing", fix)
        return Row(what, None, f"cannot read it: {error}")
    modes = list(claim.spec.access_modes or [])
    if "ReadWriteMany" not in modes:
        return Row(what, False, f"access modes {modes}: the step and every TFJob worker mount it "
                                "at once", fix + "; its storage class must offer ReadWriteMany")
    phase = claim.status.phase if claim.status else None
    return Row(what, True if phase == "Bound" else None, f"ReadWriteMany, {phase}")


def check_secret(core, cluster: Cluster) -> Row:
    what = f"credentials Secret {cluster.namespace}/{cluster.credentials_secret}"
    fix = ("create it with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (it was named "
           "with FMNIST_CREDENTIALS_SECRET at compile time)")
    try:
        secret = core.read_namespaced_secret(cluster.credentials_secret, cluster.namespace,
                                             _request_timeout=30)
    except Exception as error:
        if _status(error) == 404:
            return Row(what, False, "missing: the ingest and train pods would not start "
                                    "(CreateContainerConfigError)", fix)
        return Row(what, None, f"cannot read it: {error}")
    keys = set((secret.data or {}).keys())
    wanted = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    if not wanted <= keys:
        return Row(what, False, f"keys {sorted(keys)}", fix)
    return Row(what, True, "has AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")


def check_serving_credentials(api, cluster: Cluster) -> Row:
    from fmnist_kfp.serving.deploy.credentials import credential_problems

    what = f"serving credentials {api.namespace}/{cluster.serving_service_account}"
    try:
        problems = credential_problems(api, cluster.serving_service_account,
                                       log=lambda line: None)
    except Exception as error:  # the API server failed the read: say so, check the rest
        return Row(what, None, f"cannot check them: {error}")
    if problems:
        return Row(what, False, problems[0].split(";")[0],
                   f"kubectl apply -k {SETUP}serving-credentials -n {api.namespace} (see "
                   "credentials.env.example)")
    return Row(what, True, "ServiceAccount with an S3 Secret for KFP's object store")


def check_istio_policy(api_client, custom, cluster: Cluster) -> Row | None:
    try:
        _call(api_client, "/apis/security.istio.io/v1beta1")
    except Exception:
        return None  # no Istio: nothing stands between pipeline pods and the predictors
    what = f"Istio policy {cluster.serving_namespace}/{ISTIO_POLICY}"
    fix = f"kubectl apply -k {SETUP}serving-access -n {cluster.serving_namespace}"
    try:
        custom.get_namespaced_custom_object("security.istio.io", "v1beta1",
                                            cluster.serving_namespace, "authorizationpolicies",
                                            ISTIO_POLICY, _request_timeout=30)
    except Exception as error:
        if _status(error) == 404:
            return Row(what, False, "missing: the deploy and predict steps (no sidecar) would "
                                    "get 403 RBAC: access denied from the predictors", fix)
        return Row(what, None, f"cannot read it: {error}")
    return Row(what, True, "lets pipeline pods call /v1/models/* and /v2/models/*")


def check_network_policy(api_client, cluster: Cluster) -> Row | None:
    """Kubeflow 26.03 isolates istio-system (``KUBEFLOW_GATEWAY_POLICY``): where that policy
    exists, ``manifests/serving-network``'s must exist too, or the deploy step's verification
    and the predict step time out on the predictor's cluster-local address (the connection to
    the ``cluster-local-gateway`` pods, port 8081, is dropped). None where Kubeflow's policy is
    absent (an older release, or no Kubeflow)."""
    base = f"/apis/networking.k8s.io/v1/namespaces/{GATEWAY_NAMESPACE}/networkpolicies"
    theirs, problem = _read(api_client, f"{base}/{KUBEFLOW_GATEWAY_POLICY}")
    if problem == "missing":
        return None
    what = f"NetworkPolicy {GATEWAY_NAMESPACE}/{NETWORK_POLICY}"
    fix = f"kubectl apply -k {SETUP}serving-network (cluster-admin)"
    if problem is not None:
        return Row(what, None, f"cannot read {GATEWAY_NAMESPACE}'s NetworkPolicies "
                               f"({_reason(problem)}); on Kubeflow 26.03 with NetworkPolicy "
                               "enforced, pipeline pods reach the served model only with it",
                   f"ask the cluster admin: {fix}")
    ours, problem = _read(api_client, f"{base}/{NETWORK_POLICY}")
    if problem == "missing":
        return Row(what, False, f"missing, while {KUBEFLOW_GATEWAY_POLICY} admits to "
                                f"{GATEWAY_NAMESPACE} only its own pods: where the cluster "
                                "enforces NetworkPolicy, the deploy and predict steps cannot "
                                "reach the model (knative-local-gateway, port 8081)", fix)
    if problem is not None:
        return Row(what, None, f"cannot read it ({_reason(problem)})", fix)
    return Row(what, True, "lets profile namespaces' pipeline pods reach the cluster-local "
                           "gateway (port 8081)")


def check_permissions(api_client, cluster: Cluster) -> list[Row]:
    from fmnist_kfp.kubernetes.access_review import PATH as ACCESS_REVIEW_PATH
    from fmnist_kfp.kubernetes.access_review import build_access_review

    user = (f"system:serviceaccount:{cluster.namespace}:{cluster.runner_service_account}")
    fix = (f"kubectl apply -k {SETUP}standalone-rbac" if not cluster.multi_user else
           "the profile's default-editor gets it from kubeflow-edit once the component is "
           "installed with Kubeflow's roles (e.g. training-operator's kubeflow-training-edit)")
    rows = []
    headers: dict[str, str] = {"Impersonate-User": user}
    who = cluster.runner_service_account
    for verb, group, resource, subresource, why in PERMISSIONS:
        review = build_access_review(namespace=cluster.namespace, verb=verb, group=group,
                                     resource=resource, subresource=subresource)
        body = api_client.sanitize_for_serialization(review)
        try:
            answer = _call(api_client, ACCESS_REVIEW_PATH, "POST", body,
                           {**headers, "Content-Type": "application/json"})
        except Exception as error:
            if headers and _status(error) == 403:
                rows.append(Row("permissions", None, f"you may not impersonate {user}; "
                                                     "showing your own permissions instead"))
                headers, who = {}, "you"
                answer = _call(api_client, ACCESS_REVIEW_PATH, "POST", body,
                               {"Content-Type": "application/json"})
            else:
                rows.append(Row(f"{verb} {resource}", None, f"cannot ask: {error}"))
                continue
        allowed = bool(((answer or {}).get("status") or {}).get("allowed"))
        name = f"{resource}.{group}" if group else resource  # kubectl's spelling:
        name = f"{name}/{subresource}" if subresource else name  # jobs.batch/status
        rows.append(Row(f"{who} may {verb} {name}", allowed, why, "" if allowed else fix))
    return rows


def _message(error) -> str:
    """The API server's own words for a refused request (its Status message), else the HTTP
    status."""
    try:
        message = json.loads(getattr(error, "body", "") or "{}").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"{_reason(error)}: {message}" if message else _reason(error)


def _serves(api_client, group: str, version: str, plural: str) -> bool | None:
    """Whether discovery lists ``plural`` at ``group/version``; None when it cannot be asked."""
    try:
        listing = _call(api_client, f"/apis/{group}/{version}")
    except Exception as error:
        return False if _status(error) == 404 else None
    return plural in {resource.get("name") for resource in (listing or {}).get("resources") or []}


def _read(api_client, path: str) -> tuple[dict | None, object]:
    """``(object, None)``, ``(None, "missing")`` on a 404, or ``(None, error)``."""
    try:
        return _call(api_client, path) or {}, None
    except Exception as error:
        return None, ("missing" if _status(error) == 404 else error)


def _condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), None)


def _queue_probe(queue: str) -> dict:
    """The TFJob whose server-side dry run tells whether Kueue manages TFJobs."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": QUEUE_PROBE,
                         "labels": {"app.kubernetes.io/part-of": "fmnist-kfp",
                                    KUEUE_QUEUE_LABEL: queue}},
            "spec": {"tfReplicaSpecs": {"Worker": {
                "replicas": 1, "restartPolicy": "Never",
                "template": {"spec": {"containers": [{"name": "tensorflow",
                                                      "image": PROBE_IMAGE}]}}}}}}


def check_kueue(api_client, cluster: Cluster, tfjobs_served: bool) -> tuple[list[Row], str]:
    """The ``queue`` key: Kueue's API, the LocalQueue in the run's namespace, and whether Kueue
    manages TFJobs; returns the rows and the Kueue API version served ("" when none).

    Whether Kueue manages TFJobs is asked of Kueue itself: a TFJob labelled with the queue is
    sent as a server-side dry run (``dryRun=All``: admission runs, mutating webhooks included,
    nothing is stored) and must come back with ``spec.runPolicy.suspend: true``, which Kueue's
    mutating webhook sets on every job of a queue (kubernetes-sigs/kueue v0.19.2
    pkg/controller/jobframework/base_webhook.go lines 69-82, defaults.go lines 36-46,
    pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go lines 50-56; the webhook
    declares ``sideEffects=None``, so it runs on dry runs: tfjob_controller.go line 50). With the
    ``kubeflow.org/tfjob`` integration off — the default since v0.19 — the webhook is a no-op
    (jobframework/setup.go lines 108-111) and the job runs at once, its queue ignored."""
    queue, namespace = cluster.scheduling.queue, cluster.namespace
    version, unknown = "", False
    for candidate in KUEUE_VERSIONS:
        served = _serves(api_client, KUEUE_GROUP, candidate, "localqueues")
        if served:
            version = candidate
            break
        unknown = unknown or served is None
    if not version:
        if unknown:
            return [Row("Kueue", None, "cannot ask the API server whether Kueue is served")], ""
        return [Row("Kueue", False, f"localqueues.{KUEUE_GROUP} is not served "
                                    f"({'/'.join(KUEUE_VERSIONS)}): Kueue is not installed, so "
                                    f"queue {queue!r} cannot hold the run's jobs",
                    KUEUE_INSTALL)], ""
    rows = [Row("Kueue", True, f"localqueues.{KUEUE_GROUP}, served at {version}")]

    what = f"Kueue LocalQueue {namespace}/{queue}"
    local_queue, problem = _read(api_client, f"/apis/{KUEUE_GROUP}/{version}/namespaces/"
                                             f"{namespace}/localqueues/{queue}")
    if problem == "missing":
        rows.append(Row(what, False, f"missing: the run's jobs would wait suspended, their "
                                     f"Workloads saying \"LocalQueue {queue} doesn't exist\"",
                        f"ask the cluster admin for a LocalQueue {queue} in {namespace}, or "
                        f"apply the example (ClusterQueue, flavor, LocalQueue fmnist, priority "
                        f"classes; cluster-admin): kubectl apply -k {SCHEDULING_SETUP} -n "
                        f"{namespace}, then use queue fmnist"))
    elif problem is not None:
        rows.append(Row(what, None, f"cannot read it ({_reason(problem)})"))
    else:
        cluster_queue = (local_queue.get("spec") or {}).get("clusterQueue", "")
        # Its Active condition (kueue v0.19.2 apis/kueue/v1beta2/localqueue_types.go lines
        # 154-156), False with reason Stopped, ClusterQueueDoesNotExist or
        # ClusterQueueIsInactive (pkg/controller/core/localqueue_controller.go lines 193-213).
        active = _condition(local_queue, "Active")
        if active is not None and active.get("status") == "False":
            rows.append(Row(what, False, f"inactive ({active.get('reason')}: "
                                         f"{active.get('message')}; ClusterQueue "
                                         f"{cluster_queue}): Kueue admits nothing from it",
                            f"ask the cluster admin to create or reactivate ClusterQueue "
                            f"{cluster_queue} (kubectl describe localqueue {queue} -n "
                            f"{namespace})"))
        elif active is None:
            rows.append(Row(what, None, f"ClusterQueue {cluster_queue}; no status yet (is "
                                        "kueue-controller-manager running in kueue-system?)"))
        else:
            rows.append(Row(what, True, f"ClusterQueue {cluster_queue}, active"))

    if tfjobs_served:
        rows.append(_check_kueue_manages_tfjobs(api_client, cluster))
    return rows, version


def _check_kueue_manages_tfjobs(api_client, cluster: Cluster) -> Row:
    from kubernetes import client

    queue, namespace = cluster.scheduling.queue, cluster.namespace
    what = "Kueue manages TFJobs"
    label = f"{KUEUE_QUEUE_LABEL}={queue}"
    try:
        answer = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "tfjobs", _queue_probe(queue), dry_run="All",
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, 30))
    except Exception as error:
        return Row(what, None, f"could not check: the server-side dry run of a TFJob labelled "
                               f"{label} in {namespace} was refused ({_message(error)})",
                   "if Kueue's webhook failed, TFJobs cannot be created at all: check "
                   "kueue-controller-manager in kueue-system; else ask the cluster admin "
                   "whether Kueue's integrations.frameworks lists kubeflow.org/tfjob")
    suspended = ((((answer or {}).get("spec") or {}).get("runPolicy") or {}).get("suspend"))
    if suspended is True:
        return Row(what, True, f"a TFJob labelled {label} is created suspended (server-side "
                               "dry run): Kueue holds it until admitted")
    return Row(what, False, f"a TFJob labelled {label} is not suspended on create "
                            "(server-side dry run): Kueue does not manage TFJobs, so the "
                            "run's TFJobs would start at once, their queue ignored",
               KUEUE_ENABLE_TFJOB)


def check_priority(api_client, cluster: Cluster, kueue_version: str) -> list[Row]:
    """The ``priority_class`` key: the PriorityClass its pods name (the API server refuses a
    pod naming a missing one: kubernetes plugin/pkg/admission/priority/admission.go, "no
    PriorityClass with name ... was found"), and with a queue Kueue's WorkloadPriorityClass of
    the same name (a missing one leaves the job suspended without a Workload or an event:
    kueue v0.19.2 pkg/controller/jobframework/reconciler.go lines 1698-1705 and 507-521)."""
    name = cluster.scheduling.priority_class
    fix = (f"ask the cluster admin for it, or apply the example classes fmnist-high and "
           f"fmnist-low (cluster-admin): kubectl apply -k {SCHEDULING_SETUP} -n "
           f"{cluster.namespace}")
    rows = []
    what = f"PriorityClass {name}"
    found, problem = _read(api_client, f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
    if problem == "missing":
        rows.append(Row(what, False, "missing: the API server refuses the run's pods (no "
                                     f"PriorityClass with name {name} was found)", fix))
    elif problem is not None:
        rows.append(Row(what, None, f"cannot read it ({_reason(problem)})"))
    else:
        rows.append(Row(what, True, f"value {found.get('value')}, preemptionPolicy "
                                    f"{found.get('preemptionPolicy') or 'PreemptLowerPriority'}"))
    if cluster.scheduling.queue and kueue_version:
        what = f"Kueue WorkloadPriorityClass {name}"
        found, problem = _read(api_client, f"/apis/{KUEUE_GROUP}/{kueue_version}/"
                                           f"workloadpriorityclasses/{name}")
        if problem == "missing":
            rows.append(Row(what, False, "missing: Kueue makes no Workload for a job naming "
                                         "it, so the job stays suspended with no event", fix))
        elif problem is not None:
            rows.append(Row(what, None, f"cannot read it ({_reason(problem)})"))
        else:
            rows.append(Row(what, True, f"value {found.get('value')}"))
    return rows


def _operator_flag(deployment: dict) -> str | None:
    """The training operator's ``--gang-scheduler-name`` (Go's flag package takes ``-`` or
    ``--``, ``=value`` or the next argument); None when it is not given."""
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec")
                  or {}).get("containers") or []
    for container in containers:
        words = list(container.get("command") or []) + list(container.get("args") or [])
        for index, word in enumerate(words):
            match = _GANG_FLAG.match(str(word))
            if match:
                if match[1] is not None:
                    return match[1]
                return str(words[index + 1]) if index + 1 < len(words) else ""
    return None


def check_gang(api_client, cluster: Cluster) -> list[Row]:
    """The ``gang`` key: the gang scheduler's PodGroup API, Volcano's queue (open), and the
    training operator's ``--gang-scheduler-name``, without which ``runPolicy.schedulingPolicy``
    is silently ignored (kubeflow/trainer v1.9.2 pkg/controller.v1/common/job.go line 250,
    pod.go line 440; cmd/training-operator.v1/main.go lines 96-97 and 191-202: ``volcano`` in
    any case is Volcano, any other name scheduler-plugins; ``None`` turns it off:
    pkg/controller.v1/common/job_controller.go line 77)."""
    gang = cluster.scheduling.gang
    group, version, scheduler, install = GANG_APIS[gang]
    rows = []
    served = _serves(api_client, group, version, "podgroups")
    what = f"{scheduler} PodGroup"
    if served is None:
        rows.append(Row(what, None, "cannot ask the API server"))
    elif not served:
        rows.append(Row(what, False, f"podgroups.{group}/{version} is not served: "
                                     f"{scheduler} is not installed (and a training operator "
                                     "started with its --gang-scheduler-name exits)", install))
    else:
        rows.append(Row(what, True, f"podgroups.{group}, served at {version}"))
    if gang == "volcano" and served:
        rows.append(_check_volcano_queue(api_client, cluster))
    rows.append(_check_operator_flag(api_client, gang))
    return rows


def _check_volcano_queue(api_client, cluster: Cluster) -> Row:
    """The Volcano queue of the run's PodGroups: ``gang_queue``, else ``default`` — which
    Volcano's PodGroup webhook replaces with the namespace's ``scheduling.volcano.sh/
    queue-name`` annotation (volcano v1.15.1 pkg/webhooks/admission/podgroups/mutate/
    mutate_podgroup.go lines 104-122). Volcano's admission refuses a PodGroup of a missing or
    not ``Open`` queue (validate/validate_podgroup.go lines 101-118); the operator then only
    logs it and the TFJob stays Created with no pods (kubeflow/trainer v1.9.2
    pkg/controller.v1/common/job.go lines 315-334)."""
    name, source = cluster.scheduling.gang_queue, "gang_queue"
    if not name:
        name, source = VOLCANO_DEFAULT_QUEUE, "Volcano's default"
        namespace, _ = _read(api_client, f"/api/v1/namespaces/{cluster.namespace}")
        annotated = (((namespace or {}).get("metadata") or {}).get("annotations")
                     or {}).get(VOLCANO_QUEUE_ANNOTATION)
        if annotated:
            name = annotated
            source = f"namespace {cluster.namespace}'s {VOLCANO_QUEUE_ANNOTATION}"
    what = f"Volcano queue {name}"
    queue, problem = _read(api_client, f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}")
    if problem == "missing":
        fix = (f"set gang_queue to an Open Volcano queue, or ask the cluster admin to create "
               f"the Queue {name}")
        if name == VOLCANO_DEFAULT_QUEUE:
            fix = ("Volcano's scheduler creates the queue default when it starts (volcano "
                   "v1.15.1 pkg/scheduler/cache/cache.go lines 464-519): is volcano-scheduler "
                   "running in volcano-system? Or set gang_queue to an Open queue")
        return Row(what, False, f"missing ({source}): Volcano refuses the run's PodGroups "
                                "(\"unable to find queue\") and the TFJobs wait with no pods", fix)
    if problem is not None:
        return Row(what, None, f"cannot read it ({_reason(problem)})")
    state = (queue.get("status") or {}).get("state")
    if state == "Open":
        return Row(what, True, f"Open ({source})")
    if not state:
        return Row(what, None, f"no state yet ({source}): is volcano-controllers running?")
    return Row(what, False, f"{state} ({source}): Volcano refuses PodGroups of a queue that is "
                            "not Open, and the TFJobs wait with no pods",
               f"ask the cluster admin to open it (vcctl queue operate --name {name} --action "
               "open), or set gang_queue to an Open queue")


def _check_operator_flag(api_client, gang: str) -> Row:
    what = "training operator gang scheduling"
    path = f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/deployments/{OPERATOR_DEPLOYMENT}"
    deployment, problem = _read(api_client, path)
    if deployment is None:
        why = ("not found" if problem == "missing" else _reason(problem))
        return Row(what, None, f"could not check: cannot read deployment "
                               f"{OPERATOR_NAMESPACE}/{OPERATOR_DEPLOYMENT} ({why}); the "
                               "operator ignores runPolicy.schedulingPolicy unless it runs "
                               "with --gang-scheduler-name", _gang_flag_fix(gang))
    flag = _operator_flag(deployment)
    if not flag or flag == "None":
        return Row(what, False, f"{OPERATOR_DEPLOYMENT} runs without --gang-scheduler-name: it "
                                "ignores runPolicy.schedulingPolicy silently (no PodGroup, the "
                                "default scheduler, no event)", _gang_flag_fix(gang))
    runs = "volcano" if flag.lower() == "volcano" else "scheduler-plugins"
    if runs != gang:
        return Row(what, False, f"{OPERATOR_DEPLOYMENT} runs with --gang-scheduler-name={flag} "
                                f"({runs}'s PodGroups), not {gang}",
                   f"set gang to {runs}, or {_gang_flag_fix(gang)}")
    return Row(what, True, f"{OPERATOR_DEPLOYMENT} runs with --gang-scheduler-name={flag}")


def check_scheduling(api_client, cluster: Cluster, tfjobs_served: bool) -> list[Row]:
    """What the run's ``kubernetes.scheduling`` needs on the cluster (nothing when it sets none
    of queue, priority_class, gang)."""
    scheduling = cluster.scheduling
    rows: list[Row] = []
    kueue_version = ""
    if scheduling.queue:
        kueue_rows, kueue_version = check_kueue(api_client, cluster, tfjobs_served)
        rows += kueue_rows
    if scheduling.priority_class:
        rows += check_priority(api_client, cluster, kueue_version)
    if scheduling.gang:
        rows += check_gang(api_client, cluster)
    return rows


def scheduling_from(text: str) -> SchedulingSettings:
    """``--scheduling``: the run's ``kubernetes.scheduling`` as JSON, checked as a run checks
    it."""
    if not text:
        return SchedulingSettings()
    try:
        values = json.loads(text)
    except ValueError as error:
        raise UserInputError(f"--scheduling is not JSON ({error}); give an object, e.g. "
                             "'{\"queue\": \"team-a\", \"gang\": \"volcano\"}'") from None
    if not isinstance(values, dict):
        raise UserInputError("--scheduling must be a JSON object, e.g. '{\"queue\": "
                             "\"team-a\"}'")
    return SchedulingSettings.from_dict(values).validate()


def preflight(endpoint, api_client, cluster: Cluster, *, check_backend: bool = True
              ) -> list[Row]:
    from kubernetes import client

    from fmnist_kfp.serving.deploy.kserve_api import KServeApi

    rows = [check_kfp(endpoint)] if check_backend else []
    server = check_api_server(api_client)
    if server is not None:
        return [*rows, server]
    apis = check_apis(api_client)
    rows += apis
    core = client.CoreV1Api(api_client)
    served = {row.check for row in apis if row.ok}
    if {"TFJob (Training Operator v1)", "Katib Experiment"} <= served:  # else nothing to watch
        rows.append(check_katib_watch(api_client, core))
    rows += check_scheduling(api_client, cluster, "TFJob (Training Operator v1)" in served)
    serving = KServeApi(api_client, cluster.serving_namespace)
    rows.append(check_mode(serving))
    rows.append(check_pvc(core, cluster))
    if cluster.credentials_secret:
        rows.append(check_secret(core, cluster))
    rows.append(check_serving_credentials(serving, cluster))
    istio = check_istio_policy(api_client, client.CustomObjectsApi(api_client), cluster)
    if istio is not None:
        rows.append(istio)
    network = check_network_policy(api_client, cluster)
    if network is not None:
        rows.append(network)
    rows += check_permissions(api_client, cluster)
    return rows


def ready(rows: list[Row]) -> bool:
    return all(row.ok is not False for row in rows)


def render(rows: list[Row], width: int = 100) -> str:
    marks = {True: "ok", False: "MISSING", None: "note"}
    name_width = min(max(len(row.check) for row in rows), 48)
    lines = []
    for row in rows:
        lines.append(f"{marks[row.ok]:<8} {row.check:<{name_width}}  {row.found}")
        if row.fix and row.ok is not True:
            lines.append(f"{'':<8} {'':<{name_width}}  fix: {row.fix}")
    verdict = ("ready for a first run" if ready(rows) else
               f"NOT ready: {sum(row.ok is False for row in rows)} missing")
    return "\n".join(lines + ["", verdict])


def in_pod(kubeconfig: str = "", context: str = "", environ=None) -> bool:
    """Whether to use the pod's in-cluster configuration: in a pod (``$KUBERNETES_SERVICE_HOST``
    is set) where no kubeconfig was asked for (``--kubeconfig``, ``--context``, ``$KUBECONFIG``)
    and ~/.kube/config does not exist, as in a Kubeflow notebook. The ``kubernetes`` client's
    own ``config.load_config`` prefers a kubeconfig in the same way."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("KUBERNETES_SERVICE_HOST", "").strip()) and not (
        kubeconfig or context or environ.get("KUBECONFIG", "").strip()
        or os.path.exists(os.path.expanduser("~/.kube/config")))


def kubernetes_api(kubeconfig: str = "", context: str = ""):
    """An ApiClient for the cluster, and which configuration it came from: the pod's
    in-cluster one (its ServiceAccount's token and CA: :func:`in_pod`), else the kubeconfig
    (``kubeconfig``, else ``$KUBECONFIG`` or ~/.kube/config)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if in_pod(kubeconfig, context):
        from kubernetes.config import incluster_config

        try:
            config.load_incluster_config(client_configuration=configuration)
        except Exception as error:
            raise UserInputError(
                f"cannot load this pod's in-cluster configuration ({error}; "
                "$KUBERNETES_SERVICE_HOST says it runs in a pod); mount its ServiceAccount token "
                f"({incluster_config.SERVICE_TOKEN_FILENAME}), or point --kubeconfig at a "
                "kubeconfig for the cluster") from None
        source = ("in-cluster configuration: this pod's ServiceAccount token, "
                  f"{incluster_config.SERVICE_TOKEN_FILENAME}")
    else:
        # $KUBECONFIG read now: the client reads it once, when it is imported.
        kubeconfig = (kubeconfig or os.environ.get("KUBECONFIG", "").strip()
                      or os.path.expanduser("~/.kube/config"))
        try:
            config.load_kube_config(config_file=kubeconfig, context=context or None,
                                    client_configuration=configuration, persist_config=False)
        except Exception as error:
            raise UserInputError(f"cannot load the kubeconfig ({error}); point --kubeconfig or "
                                 "$KUBECONFIG at one for the cluster") from None
        source = f"kubeconfig {_kubeconfig_name(kubeconfig, context)}"
    configuration.retries = RETRIES
    return client.ApiClient(configuration), source


def _kubeconfig_name(kubeconfig: str, context: str) -> str:
    """``<file>, context <name>``: the kubeconfig loaded and its context."""
    from kubernetes.config import kube_config

    if not context:
        try:
            _, active = kube_config.list_kube_config_contexts(config_file=kubeconfig)
            context = (active or {}).get("name", "")
        except Exception:  # it loaded; the name is only for the reader
            context = ""
    return f"{kubeconfig}, context {context}" if context else kubeconfig


def api_client_from(kubeconfig: str = "", context: str = ""):
    """An ApiClient for the cluster (:func:`kubernetes_api`)."""
    return kubernetes_api(kubeconfig, context)[0]


def cluster_from(args) -> Cluster:
    from fmnist_kfp.settings.platform import PVC_ENV, SECRET_ENV
    from fmnist_kfp.settings.serving import KFP_STORE_SERVICE_ACCOUNT

    multi_user = bool(args.namespace)
    namespace = args.namespace or "kubeflow"
    return Cluster(
        namespace=namespace,
        runner_service_account=args.runner_service_account or (
            "default-editor" if multi_user else "pipeline-runner"),
        pvc=args.pvc or os.environ.get(PVC_ENV, "").strip() or "fmnist-data",
        credentials_secret=(args.credentials_secret
                            or os.environ.get(SECRET_ENV, "").strip()),
        serving_namespace=args.serving_namespace or namespace,
        serving_service_account=args.serving_service_account or KFP_STORE_SERVICE_ACCOUNT,
        multi_user=multi_user,
        scheduling=scheduling_from(getattr(args, "scheduling", "") or ""),
    )
