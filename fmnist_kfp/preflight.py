"""``fmnist-kfp preflight``: is this cluster ready for a first run? Each check prints what it
found and, for a miss, the fix; the exit code says whether every required piece is there.

It asks, with the user's kubeconfig and the KFP endpoint:

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
  serving ServiceAccount and its S3 Secret (``serving.deploy.credentials``), and the Istio
  policy that lets pipeline pods reach the predictors (when Istio is installed);
* every permission the pipeline's steps use, as SelfSubjectAccessReviews made *as* the
  pipeline's ServiceAccount (impersonation; Kubeflow's kubeflow-edit lets a profile's users
  impersonate its ServiceAccounts): ``pipeline-runner`` on standalone KFP, the profile's
  ``default-editor`` on multi-user Kubeflow.

upstream: docs/upstream.md#katib, #kubeflow-manifests
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone

from fmnist.errors import RemoteError, UserInputError, connection_problem

ISTIO_POLICY = "fmnist-serving-in-cluster"
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
)


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
    from serving.deploy.kserve_deployer import cluster_default_mode

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
    from serving.deploy.credentials import credential_problems

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


def check_permissions(api_client, cluster: Cluster) -> list[Row]:
    from fmnist.kubernetes.access_review import PATH as ACCESS_REVIEW_PATH
    from fmnist.kubernetes.access_review import build_access_review

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
        name = f"{resource}/{subresource}" if subresource else resource
        name = f"{name}.{group}" if group else name
        rows.append(Row(f"{who} may {verb} {name}", allowed, why, "" if allowed else fix))
    return rows


def preflight(endpoint, api_client, cluster: Cluster, *, check_backend: bool = True
              ) -> list[Row]:
    from kubernetes import client

    from serving.deploy.kserve_api import KServeApi

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
    serving = KServeApi(api_client, cluster.serving_namespace)
    rows.append(check_mode(serving))
    rows.append(check_pvc(core, cluster))
    if cluster.credentials_secret:
        rows.append(check_secret(core, cluster))
    rows.append(check_serving_credentials(serving, cluster))
    istio = check_istio_policy(api_client, client.CustomObjectsApi(api_client), cluster)
    if istio is not None:
        rows.append(istio)
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


def api_client_from(kubeconfig: str = "", context: str = ""):
    """An ApiClient from the kubeconfig (``$KUBECONFIG`` or ~/.kube/config)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig or None, context=context or None,
                                client_configuration=configuration, persist_config=False)
    except Exception as error:
        raise UserInputError(f"cannot load the kubeconfig ({error}); point --kubeconfig or "
                             "$KUBECONFIG at one for the cluster") from None
    configuration.retries = RETRIES
    return client.ApiClient(configuration)


def cluster_from(args) -> Cluster:
    from fmnist.settings.platform import PVC_ENV, SECRET_ENV
    from fmnist.settings.serving import KFP_STORE_SERVICE_ACCOUNT

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
    )
