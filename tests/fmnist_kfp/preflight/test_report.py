"""``fmnist-kfp preflight``'s table and exit code (fmnist_kfp.preflight.report) against
Kubeflow on a real API server (tests/fmnist_kfp/preflight/on_the_api_server.py: kube-apiserver
v1.34.1 with RBAC, a Kubeflow 1.11 install's CRDs, the README's setup in ``kubeflow``), plus
the KFP API stand-in: ready when every piece is there; each piece taken away, one at a time (the
KFP backend, an API no longer served, storage, serving, Katib's watch, each permission the
authorizer no longer grants), is named and makes it exit non-zero."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fmnist_kfp.preflight import PERMISSIONS
from tests.fmnist_kfp.preflight.cluster import KATIB_CONFIG, NS, missing_lines, preflight
from tests.fmnist_kfp.test_cluster_client import HEALTHZ_2_5


def test_a_ready_cluster_passes(kubeflow, capsys):
    cluster, kfp = kubeflow
    assert preflight(cluster, kfp) == 0, capsys.readouterr().out
    output = capsys.readouterr().out
    assert "ready for a first run" in output and not missing_lines(output)
    assert "TFJob (Training Operator v1)" in output and "served at v1" in output
    assert "KServe default mode" in output and "Serverless" in output
    assert "PVC kubeflow/fmnist-data" in output and "ReadWriteMany, Bound" in output
    # Permissions are asked as the steps' ServiceAccount, each allowed by the Role.
    granted = [line for line in output.splitlines() if " pipeline-runner may " in line]
    assert len(granted) == len(PERMISSIONS) and all(
        line.startswith("ok") for line in granted), output


def _katib_config_without_tfjob(config_map: dict) -> None:
    # katib-config without TFJob: never watched (cmd/katib-controller/v1beta1/main.go 80-85).
    config_map["data"]["katib-config.yaml"] = KATIB_CONFIG.replace(
        "      - TFJob.v1.kubeflow.org\n", "")


def _read_only_claim(claim: dict) -> None:
    claim["spec"]["accessModes"] = ["ReadWriteOnce"]


def _no_endpoint(secret: dict) -> None:
    secret["metadata"]["annotations"].pop("serving.kserve.io/s3-endpoint")


PIECES = {
    "kfp-backend": ("KFP backend", lambda c, k: setattr(k, "healthz", HEALTHZ_2_5)),
    "tfjob-crd": ("TFJob", lambda c, k: c.uninstall_crd("tfjobs.kubeflow.org")),
    "experiment-crd": ("Katib Experiment",
                       lambda c, k: c.uninstall_crd("experiments.kubeflow.org")),
    "trial-crd": ("Katib Trial", lambda c, k: c.uninstall_crd("trials.kubeflow.org")),
    "inferenceservice-crd": ("KServe InferenceService", lambda c, k: c.uninstall_crd(
        "inferenceservices.serving.kserve.io")),
    "servingruntime-crd": ("KServe ServingRuntime", lambda c, k: c.uninstall_crd(
        "servingruntimes.serving.kserve.io")),
    "pvc": ("PVC kubeflow/fmnist-data",
            lambda c, k: c.delete("v1", "PersistentVolumeClaim", "fmnist-data", NS)),
    "pvc-rwo": ("PVC kubeflow/fmnist-data", lambda c, k: c.edit(
        "v1", "PersistentVolumeClaim", "fmnist-data", NS, _read_only_claim)),
    "serving-account": ("serving credentials",
                        lambda c, k: c.delete("v1", "ServiceAccount", "fmnist-serving", NS)),
    "serving-secret": ("serving credentials",
                       lambda c, k: c.delete("v1", "Secret", "fmnist-kfp-object-store", NS)),
    "serving-endpoint": ("serving credentials", lambda c, k: c.edit(
        "v1", "Secret", "fmnist-kfp-object-store", NS, _no_endpoint)),
    "istio-policy": ("Istio policy", lambda c, k: c.delete(
        "security.istio.io/v1beta1", "AuthorizationPolicy", "fmnist-serving-in-cluster", NS)),
    # Training Operator v1 installed after Katib: katib-controller skipped the TFJob watch
    # (kubeflow/katib v0.19.0 pkg/controller.v1beta1/trial/trial_controller.go lines 103-127).
    "katib-started-before-tfjob-crd": ("Katib watches TFJobs", lambda c, k: c.katib_started(
        c.crd_created() - timedelta(seconds=1))),
    "katib-config-without-tfjob": ("Katib watches TFJobs", lambda c, k: c.edit(
        "v1", "ConfigMap", "katib-config", NS, _katib_config_without_tfjob)),
    **{f"may-{verb}-{resource}{'-' + sub if sub else ''}": (
        f"may {verb} {resource}{'.' + group if group else ''}{'/' + sub if sub else ''}",
        (lambda v, g, r: lambda c, k: c.drop_permission(v, g, r))(
            verb, group, f"{resource}/{sub}" if sub else resource))
       for verb, group, resource, sub, _ in PERMISSIONS},
}


@pytest.mark.parametrize("piece", list(PIECES))
def test_each_missing_piece_is_named_and_fails(kubeflow, capsys, piece):
    cluster, kfp = kubeflow
    name, take_away = PIECES[piece]
    take_away(cluster, kfp)
    assert preflight(cluster, kfp) == 1
    output = capsys.readouterr().out
    missing = missing_lines(output)
    assert len(missing) == 1 and name in missing[0], output
    assert "NOT ready: 1 missing" in output
    fix = output.splitlines()[output.splitlines().index(missing[0]) + 1]
    assert "fix:" in fix
