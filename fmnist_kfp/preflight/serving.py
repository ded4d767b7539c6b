"""KServe's side: its default deployment mode (for information), the serving ServiceAccount
and its S3 Secret (``fmnist_kfp.serving.deploy.credentials``), and the Istio policy that lets
pipeline pods reach the predictors (when Istio is installed)."""

from __future__ import annotations

from fmnist_kfp.kubernetes.api_errors import own_status, status_line
from fmnist_kfp.preflight.common import SETUP, Cluster, Row, _call

ISTIO_POLICY = "fmnist-serving-in-cluster"


def check_mode(api) -> Row:
    """KServe's default deployment mode (inferenceservice-config), for information."""
    from fmnist_kfp.serving.deploy.kserve_deployer import cluster_default_mode

    value = cluster_default_mode(api, log=lambda line: None)
    if value is None:
        return Row("KServe default mode", None, "unknown (inferenceservice-config not "
                                                "readable): the deploy step assumes Serverless",
                   "set serving.deployment_mode if the cluster defaults to raw mode")
    return Row("KServe default mode", None, f"{value} (inferenceservice-config)")


def check_serving_credentials(api, cluster: Cluster) -> Row:
    """The serving ServiceAccount and its S3 Secret, as the deploy step checks them."""
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
    """Our Istio AuthorizationPolicy, where Istio is installed (None where it is not)."""
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
        if own_status(error) == 404:
            return Row(what, False, "missing: the deploy and predict steps (no sidecar) would "
                                    "get 403 RBAC: access denied from the predictors", fix)
        return Row(what, None, f"cannot read it ({status_line(error)})")
    return Row(what, True, "lets pipeline pods call /v1/models/* and /v2/models/*")
