"""Which APIs preflight reports (fmnist_kfp.preflight.apis): each API the pipeline creates
objects of, from API discovery on the API server stand-in (tests/standins/apiserver.py): served,
not served (a miss with its fix), or not known when the server fails the read. The same rows in
the whole table, on Kubeflow on a real API server: tests/fmnist_kfp/preflight/test_report.py."""

from __future__ import annotations

import pytest

from fmnist_kfp.preflight.apis import APIS, check_apis
from tests.standins.apiserver import ApiServerStandIn, Fault


@pytest.fixture
def standin():
    with ApiServerStandIn() as server:
        yield server


def _rows(standin) -> dict:
    return {row.check: row for row in check_apis(standin.api_client())}


def test_every_served_api_is_ok_with_its_version(standin):
    rows = _rows(standin)
    assert list(rows) == ["Katib Experiment", "Katib Trial", "KServe InferenceService",
                          "KServe ServingRuntime"]
    assert all(row.ok is True for row in rows.values())
    assert rows["KServe InferenceService"].found == \
        "inferenceservices.serving.kserve.io, served at v1beta1"
    assert rows["Katib Trial"].found == "trials.kubeflow.org, served at v1beta1"


def test_an_api_not_served_is_a_miss_naming_it_and_its_fix(standin):
    standin.served.discard(("serving.kserve.io", "v1alpha1", "servingruntimes"))
    rows = _rows(standin)
    missing = rows["KServe ServingRuntime"]
    assert missing.ok is False
    assert missing.found == "servingruntimes.serving.kserve.io/v1alpha1 is not served"
    assert missing.fix == "install KServe 0.14 or newer (applications/kserve in " \
                          "kubeflow/manifests)"
    # Its group still serves the InferenceService: only the missing plural is a miss.
    assert rows["KServe InferenceService"].ok is True


def test_a_group_version_not_served_at_all_misses_each_of_its_apis(standin):
    """Discovery of a group/version the server does not serve answers 404: read as missing."""
    standin.served -= {("kubeflow.org", "v1beta1", "experiments"),
                       ("kubeflow.org", "v1beta1", "trials")}
    rows = _rows(standin)
    assert [rows[what].ok for what in ("Katib Experiment", "Katib Trial")] == [False, False]
    assert "only needed with --tune" in rows["Katib Experiment"].fix
    assert rows["KServe InferenceService"].ok is True


def test_a_failed_discovery_is_unknown_not_missing(standin):
    standin.faults.append(Fault("GET", "/apis/kubeflow.org/v1beta1", status=500, times=2))
    rows = _rows(standin)
    for what in ("Katib Experiment", "Katib Trial"):
        assert rows[what].ok is None
        assert rows[what].found.startswith("cannot ask the API server: ")
    assert rows["KServe InferenceService"].ok is True


def test_each_api_has_a_fix():
    assert all(fix.startswith("install ") for *_, fix in APIS)
