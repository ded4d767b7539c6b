"""Whether Katib watches the trials' job kind: katib-controller builds its watches once, at
start, from katib-config's ``trialResources``, and skips a kind whose CRD did not exist then, so
trials would stay Running for hours (:func:`check_katib_watch`); and the Experiment the tune
step builds (``build_experiment``, its trials the run's TFJobs or TrainJobs) from the run's
settings, sent as a server-side dry run (:func:`check_experiment`).

upstream: docs/upstream.md#katib, #kubeflow-manifests
"""

from __future__ import annotations

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.api_errors import refusal_message, status_line
from fmnist_kfp.preflight.common import (
    Cluster,
    Row,
    _call,
    _dry_run,
    _dry_run_outcome,
    _time,
    _utc,
    probe_name,
    run_settings,
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
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
# Katib 0.19 runs TrainJob trials (pkg/apis/controller/experiments/v1beta1/constants.go lines
# 38-58) and its katib-config lists them first (manifests/v1beta1/installs/katib-cert-manager/
# katib-config.yaml line 8); an older katib-config may not.
TRAINJOB_TRIAL_RESOURCE = ("TrainJob", "v1alpha1", "trainer.kubeflow.org")
# The trials' job kind, by the operator in use: (kind, its CRD, its trialResources entry, what
# installs it).
TRIAL_KINDS = {
    "tfjob": ("TFJob", TFJOB_CRD, TFJOB_TRIAL_RESOURCE, "Training Operator v1"),
    "trainjob": ("TrainJob", TRAINJOB_CRD, TRAINJOB_TRIAL_RESOURCE, "Kubeflow Trainer v2"),
}
RESTART_KATIB = f"kubectl rollout restart deployment/{KATIB_CONTROLLER} -n {KATIB_NAMESPACE}"


def _trial_resources(config_text: str) -> list[str]:
    """katib-config's ``init.controller.trialResources``; Katib's default when it names none
    (kubeflow/katib v0.19.0 pkg/apis/config/v1beta1/defaults.go lines 50-51 and 91-94)."""
    import yaml

    config = yaml.safe_load(config_text or "") or {}
    controller = ((config.get("init") or {}).get("controller") or {}) if isinstance(
        config, dict) else {}
    return list(controller.get("trialResources") or []) or ["Job.v1.batch"]


def _watches(resources: list[str], entry: tuple = TFJOB_TRIAL_RESOURCE) -> bool:
    """Whether ``Kind.version.group`` entries name ``entry`` (by default Training Operator v1's
    TFJob; Katib parses them with schema.ParseKindArg: pkg/util/v1beta1/katibconfig/config.go
    lines 44-58)."""
    return any(tuple(str(item).split(".", 2)) == entry for item in resources)


def check_katib_watch(api_client, core, operator: str = "tfjob") -> Row:
    """Whether katib-controller watches the trials' jobs (TFJobs; TrainJobs with ``operator``
    ``trainjob``), as kubeflow/katib v0.19.0 decides it: once, at
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
    kind, crd_name, entry, installer = TRIAL_KINDS[operator]
    listed = ".".join(entry)
    what = f"Katib watches {kind}s"
    fix = (f"{RESTART_KATIB} (katib-controller then watches the {kind} CRD; install "
           f"{installer} before Katib to avoid this)")
    try:
        crd = _call(api_client, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                f"{crd_name}")
    except Exception as error:
        return Row(what, None, f"could not check: cannot read the CRD {crd_name} "
                               f"({status_line(error)})",
                   f"if {installer} was installed after Katib: {RESTART_KATIB}")
    created = _time(((crd or {}).get("metadata") or {}).get("creationTimestamp"))
    try:
        pods = core.list_namespaced_pod(KATIB_NAMESPACE, label_selector=KATIB_CONTROLLER_SELECTOR,
                                        _request_timeout=30).items
    except Exception as error:
        return Row(what, None, f"could not check: cannot list pods in {KATIB_NAMESPACE} "
                               f"({status_line(error)})",
                   f"if {installer} was installed after Katib: {RESTART_KATIB}")
    try:
        config = core.read_namespaced_config_map(KATIB_CONFIG, KATIB_NAMESPACE,
                                                 _request_timeout=30)
        resources = _trial_resources((config.data or {}).get("katib-config.yaml", ""))
    except Exception:  # unreadable: the CRD's age is still worth comparing
        resources = None
    if resources is not None and not _watches(resources, entry):
        return Row(what, False, f"katib-config's trialResources {resources} lack "
                                f"{listed}: katib-controller never watches {kind}s",
                   f"add {listed} to init.controller.trialResources in the "
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
                 else f"no creationTimestamp on the CRD {crd_name}")
        return Row(what, None, f"could not check: {found}",
                   "Katib's Experiments need katib-controller running (kubectl get pods -n "
                   f"{KATIB_NAMESPACE} -l {KATIB_CONTROLLER_SELECTOR})")
    before = [(start, name) for start, name in sorted(started) if start < created]
    if before:
        start, name = before[0]
        return Row(what, False, f"{KATIB_CONTROLLER} pod {name} started {_utc(start)}, before "
                                f"the {kind} CRD was created ({_utc(created)}): it is not "
                                f"watching {kind}s, and tuning trials would stay Running for "
                                "hours", fix)
    if any(start == created for start, _ in started):
        return Row(what, None, f"{KATIB_CONTROLLER} started in the second the {kind} CRD was "
                               f"created ({_utc(created)}): too close to tell", fix)
    start = min(start for start, _ in started)
    return Row(what, True, f"{KATIB_CONTROLLER} started {_utc(start)}, after the {kind} CRD "
                           f"({_utc(created)})")


EXPERIMENTS_PATH = "/apis/kubeflow.org/v1beta1/namespaces/{namespace}/experiments"
TUNING_EXTRA = "pip install 'fmnist-kfp[tuning]'"


def check_experiment(api_client, cluster: Cluster, operator: str, shape: str = "") -> Row:
    """The Experiment the tune step builds with the search's defaults (``build_experiment``;
    its trial template the run's ``operator``'s job, a TrainJob in the cluster's ``shape``),
    sent as a server-side dry run in the run's namespace: the Experiment CRD's schema and
    Katib's validating webhook, where it runs, judge it; nothing is stored."""
    from fmnist_kfp.kubernetes.trainjob import OVERRIDES

    what = "Katib Experiment the tune step creates"
    try:
        from fmnist_kfp.kubernetes.experiment import build_experiment
        from fmnist_kfp.kubernetes.manifest import to_manifest
        from fmnist_kfp.settings.platform import MOUNT_PATH
        from fmnist_kfp.tuning.experiment_settings import ExperimentSettings

        settings = ExperimentSettings(name=probe_name(), kubernetes=run_settings(
            cluster, gang=operator != "trainjob"))
        from fmnist_kfp.katib.parameter_budget import default_search_space

        space = default_search_space(settings)
        manifest = to_manifest(build_experiment(settings, space, f"{MOUNT_PATH}/dataset",
                                                operator, shape or OVERRIDES))
    except ModuleNotFoundError as error:  # a base install: the builders' SDKs are extras
        return Row(what, None, f"not checked: building the Experiment needs {error.name}, of "
                               f"the tuning extra ({TUNING_EXTRA})",
                   f"{TUNING_EXTRA}, then run preflight again")
    except UserInputError as error:
        return Row(what, False, f"the tune step refuses it: {error}",
                   "change the run's kubernetes or tuning settings as the message says")
    try:
        _dry_run(api_client, EXPERIMENTS_PATH.format(namespace=cluster.namespace), manifest)
    except Exception as error:
        outcome = _dry_run_outcome(error)
        if outcome == "forbidden":
            return Row(what, None, f"could not check: you may not create Experiments in "
                                   f"{cluster.namespace} ({refusal_message(error)}); the steps' "
                                   "ServiceAccount's permission is checked below")
        if outcome == "unknown":
            return Row(what, None, f"could not check: its server-side dry run failed "
                                   f"({refusal_message(error)})",
                       "if Katib's webhook could not be called, no Experiment can be created: "
                       "check katib-controller in kubeflow; else run preflight again")
        refusal = refusal_message(error)
        return Row(what, False, f"the cluster refuses it (server-side dry run: {refusal})",
                   _experiment_fix(refusal, cluster.namespace))
    trials = {"tfjob": "TFJob", "trainjob": "TrainJob"}[operator]
    return Row(what, True, f"accepted by a server-side dry run in {cluster.namespace} (its "
                           f"schema and admission webhooks; nothing stored), {trials} trials")


# Katib's webhook admits Experiments only in namespaces with this label (kubeflow/katib v0.19.0
# pkg/webhook/v1beta1/experiment/validation_webhook.go lines 74-91); Kubeflow's profile
# controller sets it on every profile's namespace, a namespace made by hand lacks it.
INJECTION_LABEL = "katib.kubeflow.org/metrics-collector-injection"


def _experiment_fix(refusal: str, namespace: str) -> str:
    """The fix of an Experiment Katib refuses: the label its webhook names, else its release."""
    if INJECTION_LABEL in refusal:
        return (f"kubectl label namespace {namespace} {INJECTION_LABEL}=enabled (Katib's "
                "webhook admits Experiments only there; Kubeflow sets it on profile namespaces)")
    return ("check that Katib runs a release fmnist-kfp supports (v0.19; docs/cluster.md) and "
            "its webhook is up; else report the message above as an fmnist-kfp bug")
