"""Reading what KServe and the API server say, rule by rule (the rules and their upstream
sources are in ``fmnist_kfp/kubernetes/inference_service_status.py``,
``serving/deploy/kserve_api.py`` and ``credentials.py``):
modes and their spellings per version, addresses, the Deployment's rollout, API errors, the
S3 Secret KServe's storage initializer needs."""

from __future__ import annotations

import base64
import json

import pytest

from fmnist_kfp.kubernetes.inference_service_status import (
    canonical_mode,
    cluster_local_url,
    default_mode_from_config,
    deployment_failed,
    deployment_rolled_out,
    describe,
    mode_for_new,
    mode_of,
    revisions_named,
    tag_url,
)
from fmnist_kfp.serving.deploy.credentials import _decoded, _secret_problem, as_s3, in_kfp_store
from fmnist_kfp.serving.deploy.kserve_api import KServeApi


def isvc(annotation=None, status_mode=None, conditions=True):
    status = {}
    if status_mode:
        status["deploymentMode"] = status_mode
    if conditions:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    metadata = {"name": "m", "annotations": {}}
    if annotation:
        metadata["annotations"]["serving.kserve.io/deploymentMode"] = annotation
    return {"metadata": metadata, "status": status}


@pytest.mark.parametrize("value,mode", [("Serverless", "Serverless"), ("Knative", "Serverless"),
                                        ("RawDeployment", "Standard"), ("Standard", "Standard"),
                                        ("ModelMesh", None), ("", None), (None, None)])
def test_canonical_modes(value, mode):
    assert canonical_mode(value) == mode


@pytest.mark.parametrize("data,expected", [
    ({"deploy": json.dumps({"defaultDeploymentMode": "Serverless"})}, "Serverless"),
    ({"deploy": json.dumps({"defaultDeploymentMode": "RawDeployment"})}, "RawDeployment"),
    ({"deploy": json.dumps({"defaultDeploymentMode": "Standard"})}, "Standard"),
    ({"deploy": json.dumps({"defaultDeploymentMode": "ModelMesh"})}, None),
    ({"deploy": "not json"}, None), ({}, None), (None, None),
])
def test_the_default_mode_in_inferenceservice_config(data, expected):
    assert default_mode_from_config(data) == expected


@pytest.mark.parametrize("obj,default,mode,annotation", [
    # The status wins and an update spells the annotation as the status does.
    (isvc("RawDeployment", "Standard"), None, "Standard", "Standard"),
    (isvc(None, "Serverless"), "RawDeployment", "Serverless", None),
    (isvc("Serverless", "Knative"), None, "Serverless", "Knative"),
    # No status field (KServe 0.14/0.15.0): a legacy annotation counts...
    (isvc("RawDeployment"), None, "Standard", "RawDeployment"),
    (isvc("Serverless"), "RawDeployment", "Serverless", "Serverless"),
    # ...a name that version does not know falls back to the default.
    (isvc("Standard"), None, "Serverless", "Standard"),
    (isvc("Standard"), "RawDeployment", "Standard", "RawDeployment"),
    # Never reconciled yet: the annotation is taken at its word.
    (isvc("Standard", conditions=False), None, "Standard", "Standard"),
    # No annotation, no status mode: the default; raw mode always gets the annotation.
    (isvc(), "RawDeployment", "Standard", "RawDeployment"),
    (isvc(), None, "Serverless", None),
    (isvc(), "Standard", "Standard", "Standard"),
])
def test_the_mode_of_an_existing_service(obj, default, mode, annotation):
    found = mode_of(obj, default)
    assert (found.mode, found.annotation) == (mode, annotation)
    assert found.source


@pytest.mark.parametrize("setting,default,mode,annotation", [
    ("", "Serverless", "Serverless", None),
    ("", None, "Serverless", None),
    ("", "RawDeployment", "Standard", "RawDeployment"),
    ("", "Standard", "Standard", "Standard"),
    ("RawDeployment", "Serverless", "Standard", "RawDeployment"),
    ("Standard", None, "Standard", "Standard"),
    ("Serverless", "Serverless", "Serverless", None),
    ("Serverless", None, "Serverless", None),
    ("Serverless", "RawDeployment", "Serverless", "Serverless"),
    ("Knative", "Standard", "Serverless", "Knative"),
])
def test_the_mode_of_a_new_service(setting, default, mode, annotation):
    found = mode_for_new(setting, default)
    assert (found.mode, found.annotation, found.serverless) == (mode, annotation,
                                                               mode == "Serverless")


def test_addresses_are_the_cluster_local_ones():
    status = {"url": "http://m.ns.example.com",
              "address": {"url": "http://m.ns.svc.cluster.local"},
              "components": {"predictor": {
                  "address": {"url": "http://m-predictor.ns.svc.cluster.local:8080/x"},
                  "traffic": [{"tag": "latest", "latestRevision": True},
                              {"tag": "prev", "latestRevision": False}]}}}
    obj = {"status": status}
    assert cluster_local_url(obj) == "http://m.ns.svc.cluster.local"
    assert tag_url(obj) == "http://latest-m-predictor.ns.svc.cluster.local:8080/x"
    assert tag_url(obj, "prev") == "http://prev-m-predictor.ns.svc.cluster.local:8080/x"
    assert tag_url(obj, "other") is None
    del status["address"]
    assert cluster_local_url(obj) == "http://m-predictor.ns.svc.cluster.local:8080/x"
    del status["components"]["predictor"]["address"]
    assert cluster_local_url(obj) is None and tag_url(obj) is None


def deployment(generation=2, observed=2, replicas=2, updated=2, total=2, available=2,
               deadline=False, spec_replicas=True):
    conditions = [{"type": "Progressing", "reason": "ProgressDeadlineExceeded",
                   "message": "too slow"}] if deadline else []
    spec = {"replicas": replicas} if spec_replicas else {}
    return {"metadata": {"generation": generation}, "spec": spec,
            "status": {"observedGeneration": observed, "updatedReplicas": updated,
                       "replicas": total, "availableReplicas": available,
                       "conditions": conditions}}


@pytest.mark.parametrize("obj,done", [
    (deployment(), True),
    (deployment(observed=1), False),                 # spec update not observed yet
    (deployment(updated=1, available=1), False),     # not every replica updated
    (deployment(total=3), False),                    # an old replica still running
    (deployment(available=1), False),                # an updated one not available
    (deployment(deadline=True), False),              # ProgressDeadlineExceeded
    (deployment(spec_replicas=False, updated=1, total=1, available=1), True),
    (None, False), ({}, False),
])
def test_a_deployment_is_rolled_out_as_kubectl_rollout_status_says(obj, done):
    assert deployment_rolled_out(obj) is done


def test_a_deployment_past_its_progress_deadline_says_why():
    assert deployment_failed(deployment(deadline=True)) == "too slow"
    assert deployment_failed(deployment()) is None and deployment_failed(None) is None


def test_describe_says_ready_reason_revisions_and_traffic():
    """No generations: the status' observedGeneration is the Knative Service's (Serverless,
    kserve v0.15.2 inference_service_status.go L510) or the Deployment's (Standard, L354),
    never comparable with the InferenceService's own."""
    obj = {"metadata": {"generation": 3},
           "status": {"observedGeneration": 2, "conditions": [
               {"type": "Ready", "status": "False", "reason": "RevisionFailed",
                "message": "boom"}],
               "components": {"predictor": {
                   "latestCreatedRevision": "r2", "latestReadyRevision": "r1",
                   "latestRolledoutRevision": "r1",
                   "traffic": [{"revisionName": "r1", "percent": 10, "latestRevision": True,
                                "tag": "latest"},
                               {"revisionName": "r1", "percent": 90, "tag": "prev"}]}}}}
    assert describe(obj) == ("Ready=False (RevisionFailed: boom) revisions created=r2 ready=r1 "
                             "rolled out=r1 traffic r1 10% (latest), r1 90% (prev)")
    assert describe({}) == "Ready=Unknown"


def test_revisions_named_are_every_revision_the_predictor_status_names():
    obj = {"status": {"components": {"predictor": {
        "latestCreatedRevision": "r3", "latestReadyRevision": "r2",
        "latestRolledoutRevision": "r1", "previousRolledoutRevision": "r0",
        "traffic": [{"revisionName": "r2", "percent": 10}, {"revisionName": "r1"}]}}}}
    assert revisions_named(obj) == {"r0", "r1", "r2", "r3"}
    assert revisions_named({}) == set()


# -- API errors ------------------------------------------------------------------------------


class Error:
    def __init__(self, status, body=None, reason=""):
        self.status, self.body, self.reason = status, body, reason


def status(message, reason="Forbidden"):
    return json.dumps({"kind": "Status", "message": message, "reason": reason})


@pytest.mark.parametrize("error,expected,absent", [
    (Error(404, "404 page not found\n", "Not Found"), "is KServe installed", "permission"),
    (Error(403, status('admission webhook "v" denied the request: no')), "webhook refused",
     "permission"),
    (Error(403, status("forbidden")), "lacks the permission", "webhook"),
    (Error(401, status("Unauthorized", "Unauthorized")), "lacks the permission", "webhook"),
    (Error(409, status("exists", "AlreadyExists")), "another client created it", "webhook"),
    (Error(422, status("invalid", "Invalid")), "HTTP 422 invalid", "permission"),
])
def test_api_errors_are_explained(error, expected, absent):
    api = KServeApi.__new__(KServeApi)
    api.namespace = "team-a"
    message = api.explain("create x", error)
    assert message.startswith("could not create x in namespace team-a: HTTP ")
    assert expected in message and absent not in message


# -- the S3 Secret ---------------------------------------------------------------------------


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(data=None, annotations=None, string_data=None):
    obj = {"metadata": {"annotations": annotations or {}}}
    if data is not None:
        obj["data"] = data
    if string_data is not None:
        obj["stringData"] = string_data
    return obj


KEYS = {"AWS_ACCESS_KEY_ID": b64("id"), "AWS_SECRET_ACCESS_KEY": b64("key")}
ENDPOINT = {"serving.kserve.io/s3-endpoint": "minio-service.kubeflow:9000",
            "serving.kserve.io/s3-usehttps": "0"}


@pytest.mark.parametrize("obj,problem", [
    (secret(KEYS, ENDPOINT), None),
    (secret(KEYS, {"serving.kserve.io/s3-endpoint": "http://minio:9000"}), None),
    (secret({**KEYS, "S3_ENDPOINT": b64("minio:9000"), "S3_USE_HTTPS": b64("0")}), None),
    (secret(None, ENDPOINT, {"AWS_ACCESS_KEY_ID": "i", "AWS_SECRET_ACCESS_KEY": "k",
                             "S3_USE_HTTPS": "0"}), None),
    (secret({"accesskey": b64("i"), "secretkey": b64("k")}, ENDPOINT), "accesskey/secretkey"),
    (secret({"AWS_SECRET_ACCESS_KEY": b64("k")}, ENDPOINT), "has no AWS_ACCESS_KEY_ID"),
    (secret(KEYS), "no serving.kserve.io/s3-endpoint annotation"),
    (secret(KEYS, {"serving.kserve.io/s3-endpoint": "minio:9000"}), "would use HTTPS"),
    (secret(KEYS, {"serving.kserve.io/s3-endpoint": "minio:9000",
                   "serving.kserve.io/s3-usehttps": "1"}), "would use HTTPS"),
])
def test_the_secret_kserve_needs(obj, problem):
    found = _secret_problem(obj, "s")
    assert (found is None) if problem is None else (problem in found and "'s'" in found)


def test_secret_values_are_read_as_kubernetes_stores_them():
    assert _decoded(b64("minio:9000")) == "minio:9000"  # data: base64
    assert _decoded("minio:9000") == "minio:9000"  # not base64: as it is
    assert _decoded("0") == "0" and _decoded("") is None and _decoded(None) is None
    # stringData is never decoded, even when it looks like base64 ("abcd" would decode).
    assert _secret_problem(secret(None, {"serving.kserve.io/s3-endpoint": "abcd"}, {
        "AWS_ACCESS_KEY_ID": "i", "AWS_SECRET_ACCESS_KEY": "k"}), "s") is not None
    assert _secret_problem(secret(None, {"serving.kserve.io/s3-endpoint": "http://abcd"}, {
        "AWS_ACCESS_KEY_ID": "i", "AWS_SECRET_ACCESS_KEY": "k"}), "s") is None


def test_kfp_store_uris():
    assert in_kfp_store("minio://mlpipeline/a/b") and not in_kfp_store("s3://mlpipeline/a")
    assert not in_kfp_store("") and not in_kfp_store(None)
    assert as_s3("minio://mlpipeline/a/b") == "s3://mlpipeline/a/b"
    assert as_s3("gs://b/a") == "gs://b/a"
