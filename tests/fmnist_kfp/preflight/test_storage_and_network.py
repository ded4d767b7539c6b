"""Storage (fmnist_kfp.preflight.storage: the configured credentials Secret) and the network
(fmnist_kfp.preflight.network: on Kubeflow 26.03, the NetworkPolicy that opens the cluster-local
gateway to pipeline pods) against Kubeflow on a real API server (tests/fmnist_kfp/preflight/
on_the_api_server.py)."""

from __future__ import annotations

from tests.fmnist_kfp.preflight.cluster import NS, missing_lines, preflight
from tests.setup_manifests import build


def test_a_configured_credentials_secret_is_checked(kubeflow, capsys):
    standin, kfp = kubeflow
    assert preflight(standin, kfp, "--credentials-secret", "s3-creds") == 1
    output = capsys.readouterr().out
    (line,) = missing_lines(output)
    assert "credentials Secret kubeflow/s3-creds" in line and "CreateContainerConfigError" in line
    standin.put({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "s3-creds", "namespace": NS}, "data": {"AWS_ACCESS_KEY_ID": "eA==",
                                                      "AWS_SECRET_ACCESS_KEY": "eA=="}})
    assert preflight(standin, kfp, "--credentials-secret", "s3-creds") == 0


def test_on_kubeflow_2603_the_gateway_network_policy_is_required(kubeflow, capsys):
    """Kubeflow 26.03 isolates istio-system (kubeflow/manifests 26.03 common/istio/
    istio-namespace/base/default-allow-same-namespace.yaml): where that policy exists,
    manifests/serving-network's must too; once applied, the cluster is ready again."""
    from tests.standins.network import KUBEFLOW_2603_ISTIO_SYSTEM, PROFILE_LABEL

    standin, kfp = kubeflow
    for name in ("istio-system", "knative-serving"):
        standin.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    standin.put({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "team-a", "labels": dict(PROFILE_LABEL)}})
    for policy in KUBEFLOW_2603_ISTIO_SYSTEM:
        standin.put(policy)
    assert preflight(standin, kfp) == 1
    [row] = missing_lines(capsys.readouterr().out)
    assert "NetworkPolicy istio-system/fmnist-pipelines-to-local-gateway" in row
    for obj in build("serving-network"):
        standin.put(obj)
    assert preflight(standin, kfp) == 0
    output = capsys.readouterr().out
    assert "ok       NetworkPolicy istio-system/fmnist-pipelines-to-local-gateway" in output


def test_without_kubeflows_gateway_policy_no_network_row_is_shown(kubeflow, capsys):
    standin, kfp = kubeflow
    assert preflight(standin, kfp) == 0
    assert "fmnist-pipelines-to-local-gateway" not in capsys.readouterr().out
