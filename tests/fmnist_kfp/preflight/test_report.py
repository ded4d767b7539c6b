"""``fmnist-kfp preflight``'s table and exit code (fmnist_kfp.preflight.report) against a
stand-in cluster (the API server and KServe stand-in with RBAC evaluated from the stored Roles,
plus the KFP API stand-in) set up with the repository's own manifests: ready when every piece is
there; each piece taken away, one at a time (the KFP backend, the APIs, storage, serving, Katib's
watch, each permission), is named and makes it exit non-zero."""

from __future__ import annotations

import pytest

from fmnist_kfp.preflight import PERMISSIONS
from tests.fmnist_kfp.preflight.cluster import (
    KATIB_CONFIG,
    NS,
    _crd_created,
    _drop_permission,
    missing_lines,
    preflight,
)
from tests.fmnist_kfp.test_cluster_client import HEALTHZ_2_5


def test_a_ready_cluster_passes(cluster, capsys):
    standin, kfp = cluster
    assert preflight(standin, kfp) == 0, capsys.readouterr().out
    output = capsys.readouterr().out
    assert "ready for a first run" in output and not missing_lines(output)
    assert "TFJob (Training Operator v1)" in output and "served at v1" in output
    assert "KServe default mode" in output and "Serverless" in output
    # Permissions are asked as the steps' ServiceAccount.
    assert set(standin.impersonated) == {"system:serviceaccount:kubeflow:pipeline-runner"}
    assert len(standin.impersonated) == len(PERMISSIONS)


PIECES = {
    "kfp-backend": ("KFP backend", lambda s, k: setattr(k, "healthz", HEALTHZ_2_5)),
    "tfjob-crd": ("TFJob", lambda s, k: s.served.discard(("kubeflow.org", "v1", "tfjobs"))),
    "experiment-crd": ("Katib Experiment", lambda s, k: s.served.discard(
        ("kubeflow.org", "v1beta1", "experiments"))),
    "trial-crd": ("Katib Trial", lambda s, k: s.served.discard(
        ("kubeflow.org", "v1beta1", "trials"))),
    "inferenceservice-crd": ("KServe InferenceService", lambda s, k: s.served.discard(
        ("serving.kserve.io", "v1beta1", "inferenceservices"))),
    "servingruntime-crd": ("KServe ServingRuntime", lambda s, k: s.served.discard(
        ("serving.kserve.io", "v1alpha1", "servingruntimes"))),
    "pvc": ("PVC kubeflow/fmnist-data", lambda s, k: s.objects.pop(
        ("PersistentVolumeClaim", NS, "fmnist-data"))),
    "pvc-rwo": ("PVC kubeflow/fmnist-data", lambda s, k: s.objects[
        ("PersistentVolumeClaim", NS, "fmnist-data")]["spec"].update(
        accessModes=["ReadWriteOnce"])),
    "serving-account": ("serving credentials", lambda s, k: s.objects.pop(
        ("ServiceAccount", NS, "fmnist-serving"))),
    "serving-secret": ("serving credentials", lambda s, k: s.objects.pop(
        ("Secret", NS, "fmnist-kfp-object-store"))),
    "serving-endpoint": ("serving credentials", lambda s, k: s.objects[
        ("Secret", NS, "fmnist-kfp-object-store")]["metadata"]["annotations"].pop(
        "serving.kserve.io/s3-endpoint")),
    "istio-policy": ("Istio policy", lambda s, k: s.objects.pop(
        ("AuthorizationPolicy", NS, "fmnist-serving-in-cluster"))),
    # Training Operator v1 installed after Katib: katib-controller skipped the TFJob watch
    # (kubeflow/katib v0.19.0 pkg/controller.v1beta1/trial/trial_controller.go lines 103-127).
    "katib-started-before-tfjob-crd": ("Katib watches TFJobs",
                                       _crd_created("2026-01-01T09:10:01Z")),
    # katib-config without TFJob: never watched (cmd/katib-controller/v1beta1/main.go 80-85).
    "katib-config-without-tfjob": ("Katib watches TFJobs", lambda s, k: s.objects[
        ("ConfigMap", NS, "katib-config")]["data"].update(
        {"katib-config.yaml": KATIB_CONFIG.replace("      - TFJob.v1.kubeflow.org\n", "")})),
    **{f"may-{verb}-{resource}{'-' + sub if sub else ''}": (
        f"may {verb} {resource}{'.' + group if group else ''}{'/' + sub if sub else ''}",
        (lambda v, g, r: lambda s, k: _drop_permission(s, v, g, r))(
            verb, group, f"{resource}/{sub}" if sub else resource))
       for verb, group, resource, sub, _ in PERMISSIONS},
}


@pytest.mark.parametrize("piece", list(PIECES))
def test_each_missing_piece_is_named_and_fails(cluster, capsys, piece):
    standin, kfp = cluster
    name, take_away = PIECES[piece]
    take_away(standin, kfp)
    assert preflight(standin, kfp) == 1
    output = capsys.readouterr().out
    missing = missing_lines(output)
    assert len(missing) == 1 and name in missing[0], output
    assert "NOT ready: 1 missing" in output
    fix = output.splitlines()[output.splitlines().index(missing[0]) + 1]
    assert "fix:" in fix
