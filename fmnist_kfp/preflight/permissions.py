"""Every permission the pipeline's steps use, as SelfSubjectAccessReviews made *as* the
pipeline's ServiceAccount (impersonation; Kubeflow's kubeflow-edit lets a profile's users
impersonate its ServiceAccounts): ``pipeline-runner`` on standalone KFP, the profile's
``default-editor`` on multi-user Kubeflow."""

from __future__ import annotations

from fmnist_kfp.kubernetes.api_errors import own_status
from fmnist_kfp.preflight.common import SETUP, Cluster, Row, _call

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
# The same steps with kubernetes.operator trainjob (or auto where only Trainer v2 runs): the
# TrainJob rows in the TFJob rows' place (:func:`permissions_for`). The launcher follows the
# TrainJob and reads node 0's pod, as it does the TFJob's chief.
TRAINJOB_PERMISSIONS = (
    ("create", "trainer.kubeflow.org", "trainjobs", "", "train: create the TrainJob"),
    ("get", "trainer.kubeflow.org", "trainjobs", "", "train: follow the TrainJob; tune: "
                                                     "examine a stalled trial's"),
    ("delete", "trainer.kubeflow.org", "trainjobs", "", "train: delete it on SIGTERM or "
                                                        "failure"),
    ("list", "", "pods", "", "train: find node 0's pod"),
    ("get", "", "pods", "log", "train: read node 0's log"),
)
_TFJOB_PATH = PERMISSIONS[:5]  # the TFJob's rows, which TRAINJOB_PERMISSIONS stand in for
# What a step reads only when it can, going on without it (a 403 is not a failure), so
# PERMISSIONS leaves it out: Kueue's Workloads (why a queued job waits: kubernetes/workload.py).
# (KServe's inferenceservice-config, read for the default mode in KServe's namespace, is such a
# read too, but configmaps are read in the run's namespace anyway: the serve_early claim.)
# With TrainJobs, the runtime too: choose_operator reads ClusterTrainingRuntime fmnist-tensorflow
# where it may and leaves a refused read to Trainer's webhook (kubernetes/training_operators.py);
# a Role cannot grant a cluster-scoped read anyway (Kubeflow 26.03 grants it to every
# authenticated user: applications/trainer/upstream/overlays/kubeflow-platform/
# kubeflow-trainer-roles.yaml lines 69-93).
# And events: why a TrainJob has no pods (Trainer's TrainJobResourcesCreationFailed).
OPTIONAL_READS = (
    ("list", "kueue.x-k8s.io", "workloads", ""),
    ("list", "", "events", ""),
    ("get", "trainer.kubeflow.org", "clustertrainingruntimes", ""),
)


def permissions_for(operator: str) -> tuple:
    """The permissions the steps use when ``operator`` (``tfjob`` or ``trainjob``) runs the
    training: :data:`PERMISSIONS`, its TFJob rows replaced by :data:`TRAINJOB_PERMISSIONS`
    for ``trainjob``."""
    if operator != "trainjob":
        return PERMISSIONS
    return TRAINJOB_PERMISSIONS + PERMISSIONS[len(_TFJOB_PATH):]


def check_permissions(api_client, cluster: Cluster, operator: str = "tfjob") -> list[Row]:
    """One row per permission of :func:`permissions_for` ``operator``, asked as the steps'
    ServiceAccount (as you, where you may not impersonate it)."""
    from fmnist_kfp.kubernetes.access_review import PATH as ACCESS_REVIEW_PATH
    from fmnist_kfp.kubernetes.access_review import build_access_review

    user = (f"system:serviceaccount:{cluster.namespace}:{cluster.runner_service_account}")
    fix = (f"kubectl apply -k {SETUP}standalone-rbac" if not cluster.multi_user else
           "the profile's default-editor gets it from kubeflow-edit once the component is "
           "installed with Kubeflow's roles (e.g. training-operator's kubeflow-training-edit, "
           "Trainer's kubeflow-trainer-edit)")
    rows = []
    headers: dict[str, str] = {"Impersonate-User": user}
    who = cluster.runner_service_account
    for verb, group, resource, subresource, why in permissions_for(operator):
        review = build_access_review(namespace=cluster.namespace, verb=verb, group=group,
                                     resource=resource, subresource=subresource)
        body = api_client.sanitize_for_serialization(review)
        try:
            answer = _call(api_client, ACCESS_REVIEW_PATH, "POST", body,
                           {**headers, "Content-Type": "application/json"})
        except Exception as error:
            if headers and own_status(error) == 403:
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
