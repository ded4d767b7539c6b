"""KServe's side of preflight (fmnist_kfp.preflight.serving), on the real API server after the
README's setup (kube-apiserver v1.34.1 with RBAC and a Kubeflow 1.11 install's CRDs, Istio's
AuthorizationPolicy among them: tests/fmnist_kfp/preflight/on_the_api_server.py): the default
deployment mode as a note, the serving ServiceAccount and its S3 Secret as the deploy step
checks them, and the Istio policy only where Istio is served. A read the server keeps failing
comes from the ``FaultProxy`` in front of it, a refused one from the real authorizer. The same
rows in the whole table: test_report.py."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config

from fmnist_kfp.preflight.common import Cluster
from fmnist_kfp.preflight.serving import (
    ISTIO_POLICY,
    check_istio_policy,
    check_mode,
    check_serving_credentials,
)
from fmnist_kfp.serving.deploy.kserve_api import KServeApi
from localcluster.fault_proxy import FaultProxy
from tests.fmnist_kfp.preflight.cluster import NS
from tests.fmnist_kfp.preflight.on_the_api_server import ISTIO_CRD

CLUSTER = Cluster(namespace=NS, runner_service_account="pipeline-runner", pvc="fmnist-data",
                  credentials_secret="", serving_namespace=NS,
                  serving_service_account="fmnist-serving", multi_user=False)


def _serving(api_client) -> KServeApi:
    return KServeApi(api_client, NS)


def _istio(api_client):
    return check_istio_policy(api_client, client.CustomObjectsApi(api_client), CLUSTER)


@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment"])
def test_the_default_mode_is_a_note_read_from_kserves_config(kubeflow, mode):
    cluster, _ = kubeflow

    def default_mode(config_map: dict) -> None:
        config_map["data"]["deploy"] = json.dumps({"defaultDeploymentMode": mode})

    cluster.edit("v1", "ConfigMap", "inferenceservice-config", NS, default_mode)
    row = check_mode(_serving(cluster.api_client))
    assert (row.check, row.ok) == ("KServe default mode", None)
    assert row.found == f"{mode} (inferenceservice-config)"


def test_an_unreadable_kserve_config_says_what_the_deploy_step_assumes(kubeflow):
    cluster, _ = kubeflow
    cluster.delete("v1", "ConfigMap", "inferenceservice-config", NS)
    row = check_mode(_serving(cluster.api_client))
    assert row.ok is None
    assert "the deploy step assumes Serverless" in row.found
    assert row.fix == "set serving.deployment_mode if the cluster defaults to raw mode"


def test_the_serving_credentials_set_up_per_the_readme_pass(kubeflow):
    cluster, _ = kubeflow
    row = check_serving_credentials(_serving(cluster.api_client), CLUSTER)
    assert (row.check, row.ok) == (f"serving credentials {NS}/fmnist-serving", True), row


def test_a_missing_service_account_is_a_miss_with_the_setup_to_apply(kubeflow):
    cluster, _ = kubeflow
    cluster.delete("v1", "ServiceAccount", "fmnist-serving", NS)
    row = check_serving_credentials(_serving(cluster.api_client), CLUSTER)
    assert row.ok is False
    assert row.found == f"ServiceAccount 'fmnist-serving' does not exist in namespace {NS}"
    assert row.fix.startswith(f"kubectl apply -k manifests/serving-credentials -n {NS}")


def test_a_failed_read_of_the_credentials_is_unknown_not_missing(kubeflow, monkeypatch):
    """A 500 on every attempt (the deploy step's reads retry it: no waiting here)."""
    cluster, _ = kubeflow
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    account = f"/api/v1/namespaces/{NS}/serviceaccounts/fmnist-serving"
    with FaultProxy(cluster.kubeconfig(NS), seed=1, rate=1.0, kinds=(500,), in_a_row=True,
                    only=lambda method, target: target.startswith(account)) as proxy:
        row = check_serving_credentials(_serving(proxy.api_client()), CLUSTER)
    assert len(proxy.injected) > 1  # retried, failed each time
    assert row.ok is None and row.found.startswith("cannot check them: "), row


def test_the_istio_policy_set_up_per_the_readme_passes(kubeflow):
    cluster, _ = kubeflow
    row = _istio(cluster.api_client)
    assert (row.check, row.ok) == (f"Istio policy {NS}/{ISTIO_POLICY}", True)


def test_a_missing_istio_policy_names_the_403_the_steps_would_get(kubeflow):
    cluster, _ = kubeflow
    cluster.delete("security.istio.io/v1beta1", "AuthorizationPolicy", ISTIO_POLICY, NS)
    row = _istio(cluster.api_client)
    assert row.ok is False
    assert "403 RBAC: access denied" in row.found
    assert row.fix == f"kubectl apply -k manifests/serving-access -n {NS}"


def test_an_unreadable_istio_policy_is_unknown(kubeflow):
    """Read by a user the real authorizer refuses AuthorizationPolicies (discovery, open to
    every authenticated user, still lists Istio)."""
    cluster, _ = kubeflow
    cluster.run_as_one_who_may_not(("security.istio.io", "authorizationpolicies"))
    row = _istio(config.new_client_from_config(str(cluster.kubeconfig(NS))))
    assert row.ok is None and row.found == "cannot read it (HTTP 403 Forbidden)", row


def test_without_istio_there_is_no_policy_row(kubeflow):
    cluster, _ = kubeflow
    cluster.uninstall_crd(ISTIO_CRD)
    assert _istio(cluster.api_client) is None
