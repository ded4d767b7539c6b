"""KServe's side of preflight (fmnist_kfp.preflight.serving), on the KServe stand-in after the
README's setup (tests/standins/kserve.py, tests/fmnist_kfp/preflight/cluster.py
``ready_cluster``): the default deployment mode as a note, the serving ServiceAccount and its S3
Secret as the deploy step checks them, and the Istio policy only where Istio is served. The same
rows in the whole table, on Kubeflow on a real API server: tests/fmnist_kfp/preflight/
test_report.py."""

from __future__ import annotations

import pytest
from kubernetes import client

from fmnist_kfp.preflight.common import Cluster
from fmnist_kfp.preflight.serving import (
    ISTIO_POLICY,
    check_istio_policy,
    check_mode,
    check_serving_credentials,
)
from fmnist_kfp.serving.deploy.kserve_api import KServeApi
from tests.fmnist_kfp.preflight.cluster import NS, ready_cluster
from tests.standins.apiserver import Fault
from tests.standins.kserve import KServeStandIn

ISTIO = ("security.istio.io", "v1beta1", "authorizationpolicies")
CLUSTER = Cluster(namespace=NS, runner_service_account="pipeline-runner", pvc="fmnist-data",
                  credentials_secret="", serving_namespace=NS,
                  serving_service_account="fmnist-serving", multi_user=False)


@pytest.fixture
def standin():
    with KServeStandIn() as server:
        ready_cluster(server)
        yield server


def _serving(standin) -> KServeApi:
    return KServeApi(standin.api_client(), NS)


def _istio(standin):
    api_client = standin.api_client()
    return check_istio_policy(api_client, client.CustomObjectsApi(api_client), CLUSTER)


@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment"])
def test_the_default_mode_is_a_note_read_from_kserves_config(mode):
    with KServeStandIn(default_mode=mode) as standin:
        row = check_mode(_serving(standin))
    assert (row.check, row.ok) == ("KServe default mode", None)
    assert row.found == f"{mode} (inferenceservice-config)"


def test_an_unreadable_kserve_config_says_what_the_deploy_step_assumes(standin):
    standin.objects.pop(("ConfigMap", NS, "inferenceservice-config"))
    row = check_mode(_serving(standin))
    assert row.ok is None
    assert "the deploy step assumes Serverless" in row.found
    assert row.fix == "set serving.deployment_mode if the cluster defaults to raw mode"


def test_the_serving_credentials_set_up_per_the_readme_pass(standin):
    row = check_serving_credentials(_serving(standin), CLUSTER)
    assert (row.check, row.ok) == (f"serving credentials {NS}/fmnist-serving", True)


def test_a_missing_service_account_is_a_miss_with_the_setup_to_apply(standin):
    standin.objects.pop(("ServiceAccount", NS, "fmnist-serving"))
    row = check_serving_credentials(_serving(standin), CLUSTER)
    assert row.ok is False
    assert row.found == f"ServiceAccount 'fmnist-serving' does not exist in namespace {NS}"
    assert row.fix.startswith(f"kubectl apply -k manifests/serving-credentials -n {NS}")


def test_a_failed_read_of_the_credentials_is_unknown_not_missing(standin, monkeypatch):
    """A 500 on every attempt (the deploy step's reads retry it: no waiting here)."""
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    standin.faults.append(Fault("GET", "/serviceaccounts/fmnist-serving", status=500, times=20))
    row = check_serving_credentials(_serving(standin), CLUSTER)
    assert row.ok is None and row.found.startswith("cannot check them: ")


def test_the_istio_policy_set_up_per_the_readme_passes(standin):
    row = _istio(standin)
    assert (row.check, row.ok) == (f"Istio policy {NS}/{ISTIO_POLICY}", True)


def test_a_missing_istio_policy_names_the_403_the_steps_would_get(standin):
    standin.objects.pop(("AuthorizationPolicy", NS, ISTIO_POLICY))
    row = _istio(standin)
    assert row.ok is False
    assert "403 RBAC: access denied" in row.found
    assert row.fix == f"kubectl apply -k manifests/serving-access -n {NS}"


def test_an_unreadable_istio_policy_is_unknown(standin):
    standin.faults.append(Fault("GET", f"/authorizationpolicies/{ISTIO_POLICY}", status=403))
    row = _istio(standin)
    assert row.ok is None and row.found == "cannot read it (HTTP 403 Forbidden)"


def test_without_istio_there_is_no_policy_row(standin):
    standin.served.discard(ISTIO)
    assert _istio(standin) is None
