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
* the objects the run's steps create, as the package's builders make them from the run's
  settings (the training job: ``build_tfjob`` or ``build_trainjob``; the Katib Experiment:
  ``build_experiment``), sent as server-side dry runs (``dryRun=All``, nothing stored), so that
  the served CRDs and the admission webhooks (the training operator's, Trainer's, Katib's,
  Kueue's) judge what a run would send (:func:`check_training`, :func:`check_experiment`);
  Trainer's webhook also tells whether our ClusterTrainingRuntime exists where it cannot be read;
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
  manages TFJobs (the dry run of the run's TFJob, labelled with the queue, comes back
  suspended); for
  ``priority_class`` the PriorityClass (and, with a queue, Kueue's WorkloadPriorityClass); for
  ``gang`` the scheduler's PodGroup API, Volcano's queue, and the training operator's
  ``--gang-scheduler-name``. Each is silently ignored, or leaves the job waiting forever, when
  missing (docs/scheduling.md).

upstream: docs/upstream.md#katib, #kubeflow-manifests; docs/scheduling.md

The package has one module per area it checks (``connection``, ``training_operator``, ``apis``,
``katib``, ``scheduling``, ``serving``, ``storage``, ``network``, ``permissions``), the shared
row and API calls (``common``) and the whole check with its table (``report``); this module
exports what the CLI and the tests use.
"""

from __future__ import annotations

from fmnist_kfp.preflight.apis import APIS, check_apis
from fmnist_kfp.preflight.common import (
    CONNECT_TIMEOUT_SECONDS,
    RETRIES,
    SETUP,
    Cluster,
    Row,
    run_settings,
)
from fmnist_kfp.preflight.connection import (
    api_client_from,
    check_api_server,
    check_kfp,
    cluster_from,
    in_pod,
    kubernetes_api,
)
from fmnist_kfp.preflight.katib import (
    KATIB_CONFIG,
    KATIB_CONTROLLER,
    KATIB_CONTROLLER_SELECTOR,
    KATIB_NAMESPACE,
    RESTART_KATIB,
    TFJOB_CRD,
    check_experiment,
    check_katib_watch,
)
from fmnist_kfp.preflight.network import (
    GATEWAY_NAMESPACE,
    KUBEFLOW_GATEWAY_POLICY,
    NETWORK_POLICY,
    check_network_policy,
)
from fmnist_kfp.preflight.permissions import (
    OPTIONAL_READS,
    PERMISSIONS,
    TRAINJOB_PERMISSIONS,
    check_permissions,
    permissions_for,
)
from fmnist_kfp.preflight.report import preflight, ready, render
from fmnist_kfp.preflight.scheduling import (
    check_gang,
    check_kueue,
    check_priority,
    check_scheduling,
    scheduling_from,
)
from fmnist_kfp.preflight.serving import (
    ISTIO_POLICY,
    check_istio_policy,
    check_mode,
    check_serving_credentials,
)
from fmnist_kfp.preflight.storage import check_pvc, check_secret
from fmnist_kfp.preflight.training_operator import (
    DryRun,
    Training,
    check_training,
    check_training_operator,
    dry_run_training_job,
)

__all__ = [
    "APIS", "CONNECT_TIMEOUT_SECONDS", "Cluster", "DryRun", "GATEWAY_NAMESPACE", "ISTIO_POLICY",
    "KATIB_CONFIG", "KATIB_CONTROLLER", "KATIB_CONTROLLER_SELECTOR", "KATIB_NAMESPACE",
    "KUBEFLOW_GATEWAY_POLICY", "NETWORK_POLICY", "OPTIONAL_READS", "PERMISSIONS",
    "RESTART_KATIB", "RETRIES", "Row", "SETUP", "TFJOB_CRD", "TRAINJOB_PERMISSIONS", "Training",
    "api_client_from", "check_api_server", "check_apis", "check_experiment", "check_gang",
    "check_istio_policy", "check_katib_watch", "check_kfp", "check_kueue", "check_mode",
    "check_network_policy", "check_permissions", "check_priority", "check_pvc",
    "check_scheduling", "check_secret", "check_serving_credentials", "check_training",
    "check_training_operator", "cluster_from", "dry_run_training_job", "in_pod",
    "kubernetes_api", "permissions_for", "preflight", "ready", "render", "run_settings",
    "scheduling_from",
]
