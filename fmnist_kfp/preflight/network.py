"""Kubeflow 26.03's NetworkPolicies isolate istio-system: where Kubeflow's policy exists, the
one that lets pipeline pods reach the cluster-local gateway must exist too
(:func:`check_network_policy`)."""

from __future__ import annotations

from fmnist_kfp.kubernetes.api_errors import status_line
from fmnist_kfp.preflight.common import SETUP, Cluster, Row, _read

# Kubeflow 26.03's NetworkPolicy that admits to istio-system pods only istio-system's
# (kubeflow/manifests 26.03 common/istio/istio-namespace/base/default-allow-same-namespace.yaml
# lines 1-12, new in 26.03: commit fcd884f71, #3342); where it exists, pipeline pods reach the
# cluster-local gateway (every Serverless predictor's address) only through ours.
GATEWAY_NAMESPACE = "istio-system"
KUBEFLOW_GATEWAY_POLICY = "default-allow-same-namespace-istio-system"
NETWORK_POLICY = "fmnist-pipelines-to-local-gateway"  # manifests/serving-network


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
                               f"({status_line(problem)}); on Kubeflow 26.03 with NetworkPolicy "
                               "enforced, pipeline pods reach the served model only with it",
                   f"ask the cluster admin: {fix}")
    ours, problem = _read(api_client, f"{base}/{NETWORK_POLICY}")
    if problem == "missing":
        return Row(what, False, f"missing, while {KUBEFLOW_GATEWAY_POLICY} admits to "
                                f"{GATEWAY_NAMESPACE} only its own pods: where the cluster "
                                "enforces NetworkPolicy, the deploy and predict steps cannot "
                                "reach the model (knative-local-gateway, port 8081)", fix)
    if problem is not None:
        return Row(what, None, f"cannot read it ({status_line(problem)})", fix)
    return Row(what, True, "lets profile namespaces' pipeline pods reach the cluster-local "
                           "gateway (port 8081)")
