"""Which APIs preflight reports (fmnist_kfp.preflight.apis): each API the pipeline creates
objects of, from the real API server's discovery (kube-apiserver v1.34.1 with a Kubeflow 1.11
install's CRDs, tests/fmnist_kfp/preflight/on_the_api_server.py): served, not served (a CRD
deleted: a miss with its fix), or not known when the server keeps failing the read (the
``FaultProxy`` in front of it). The same rows in the whole table: test_report.py."""

from __future__ import annotations

import pytest

from fmnist_kfp.preflight.apis import APIS, check_apis
from localcluster.fault_proxy import FaultProxy
from tests.fmnist_kfp.preflight.cluster import NS

KATIB_V1BETA1 = "/apis/kubeflow.org/v1beta1"
# What Katib serves at kubeflow.org/v1beta1 in a Kubeflow install: once all three CRDs are
# gone, so is the group/version.
KATIB_CRDS = ("experiments.kubeflow.org", "trials.kubeflow.org", "suggestions.kubeflow.org")


def _rows(api_client) -> dict:
    return {row.check: row for row in check_apis(api_client)}


def test_every_served_api_is_ok_with_its_version(kubeflow):
    cluster, _ = kubeflow
    rows = _rows(cluster.api_client)
    assert list(rows) == ["Katib Experiment", "Katib Trial", "KServe InferenceService",
                          "KServe ServingRuntime"]
    assert all(row.ok is True for row in rows.values()), rows
    assert rows["KServe InferenceService"].found == \
        "inferenceservices.serving.kserve.io, served at v1beta1"
    assert rows["Katib Trial"].found == "trials.kubeflow.org, served at v1beta1"


def test_an_api_not_served_is_a_miss_naming_it_and_its_fix(kubeflow):
    """The ServingRuntime CRD deleted; serving.kserve.io/v1alpha1 still serves the
    ClusterServingRuntime: only the missing plural is a miss."""
    cluster, _ = kubeflow
    cluster.uninstall_crd("servingruntimes.serving.kserve.io")
    rows = _rows(cluster.api_client)
    missing = rows["KServe ServingRuntime"]
    assert missing.ok is False
    assert missing.found == "servingruntimes.serving.kserve.io/v1alpha1 is not served"
    assert missing.fix == "install KServe 0.14 or newer (applications/kserve in " \
                          "kubeflow/manifests)"
    assert rows["KServe InferenceService"].ok is True


def test_a_group_version_not_served_at_all_misses_each_of_its_apis(kubeflow):
    """Katib's CRDs deleted: discovery of kubeflow.org/v1beta1 answers 404, read as missing."""
    from kubernetes.client.exceptions import ApiException

    cluster, _ = kubeflow
    for name in KATIB_CRDS:
        cluster.uninstall_crd(name)
    with pytest.raises(ApiException) as refused:
        cluster.api_client.call_api(KATIB_V1BETA1, "GET", auth_settings=["BearerToken"],
                                    response_type="object")
    assert refused.value.status == 404
    rows = _rows(cluster.api_client)
    assert [rows[what].ok for what in ("Katib Experiment", "Katib Trial")] == [False, False]
    assert "only needed with --tune" in rows["Katib Experiment"].fix
    assert rows["KServe InferenceService"].ok is True


def test_a_failed_discovery_is_unknown_not_missing(kubeflow):
    """An API server that keeps answering 500 to kubeflow.org/v1beta1's discovery."""
    cluster, _ = kubeflow
    with FaultProxy(cluster.kubeconfig(NS), seed=1, rate=1.0, kinds=(500,), in_a_row=True,
                    only=lambda method, target: target.startswith(KATIB_V1BETA1)) as proxy:
        rows = _rows(proxy.api_client())
    assert {fault.path for fault in proxy.injected} == {KATIB_V1BETA1}
    for what in ("Katib Experiment", "Katib Trial"):
        assert rows[what].ok is None
        assert rows[what].found.startswith("cannot ask the API server: ")
    assert rows["KServe InferenceService"].ok is True


def test_each_api_has_a_fix():
    assert all(fix.startswith("install ") for *_, fix in APIS)
