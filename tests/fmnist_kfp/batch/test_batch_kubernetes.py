"""Batch prediction on Kubernetes: the Indexed Job (checked against the Kubernetes API's own
models and the real API server's rules), run through the remote-job runner on the real cluster
(tests/cluster.py: kube-controller-manager's Job controller, its pods run on the node agent) as
the pipeline-runner ServiceAccount; and the training step's Tensorboard created or re-attached
the same way. (A Job in a Kueue queue, on the real Kueue: tests/fmnist_kfp/launcher/
test_queued_on_the_cluster.py.)"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from fmnist_kfp.batch.indexed_job_scorer import IndexedJobScorer
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step, job_name
from fmnist_kfp.kubernetes.job import build_indexed_job, job_state
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.runner import JobFailed, RemoteJobRunner
from fmnist_kfp.kubernetes.tensorboard import build_tensorboard, ensure_tensorboard
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec
from fmnist_kfp.settings.jobs import KubernetesSettings
from tests.cluster import SCRIPTED_IMAGE


def _settings(mount: Path, **overrides) -> KubernetesSettings:
    values = dict(image="registry.example.com/fmnist-kfp:0.1.0", namespace="team-a",
                  pvc_name="fmnist-data", mount_path=str(mount))
    return KubernetesSettings(**{**values, **overrides})


def _spec(**overrides) -> ScoringJobSpec:
    values = dict(name="fmnist-batch-0123456789", model_dir="/mnt/fmnist/batch/x/model",
                  data_dir="/mnt/fmnist/datasets/abc", output_dir="/mnt/fmnist/batch/x/out",
                  num_shards=3)
    return ScoringJobSpec(**{**values, **overrides})


class _Response:
    def __init__(self, data: dict):
        self.data = json.dumps(data)


@pytest.fixture
def namespace(real_cluster):
    """A namespace of the real cluster with the pipeline-runner ServiceAccount, its Role, and
    the claim ``fmnist-data``."""
    real_cluster.require_node()
    name = real_cluster.step_namespace("batch")
    yield name
    real_cluster.delete_namespace(name)


def _as_runner(real_cluster, namespace: str):
    """An ``ApiClient`` of the pipeline-runner ServiceAccount, as the step pod has."""
    from kubernetes.client import ApiClient

    return ApiClient(real_cluster.configuration_as(namespace, "pipeline-runner"))


def _dry_run(real_cluster, namespace: str, manifest: dict) -> str:
    """The real API server's answer to creating ``manifest`` (dryRun=All: validated, admitted,
    not stored): "" where accepted, else its message."""
    from kubernetes.client.exceptions import ApiException

    try:
        real_cluster.create({**manifest, "metadata": {**manifest["metadata"],
                                                      "namespace": namespace}},
                            namespace=namespace, dry_run=True)
    except ApiException as error:
        assert error.status == 422, error
        return json.loads(error.body)["message"]
    return ""


def test_the_indexed_job_is_what_the_kubernetes_api_knows(real_cluster, namespace):
    """Every field survives a round trip through the kubernetes client's V1Job model (its
    OpenAPI types): nothing the API server would drop or misread; and the API server accepts
    it."""
    from kubernetes.client import ApiClient

    manifest = to_manifest(build_indexed_job(_spec(), _settings(Path("/mnt/fmnist"))))
    assert to_manifest(ApiClient().deserialize(_Response(manifest), "V1Job")) == manifest
    assert _dry_run(real_cluster, namespace, manifest) == ""
    spec = manifest["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimit"] == 2 and spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert spec["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    [container] = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "fmnist_kfp.scoring.worker"]
    assert "--shard-index" not in container["command"]  # JOB_COMPLETION_INDEX decides
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "fmnist-data"
    assert container["volumeMounts"][0]["mountPath"] == "/mnt/fmnist"
    assert manifest["metadata"]["namespace"] == "team-a"


def test_the_api_servers_rules_refuse_what_it_refuses(real_cluster, namespace):
    manifest = to_manifest(build_indexed_job(_spec(), _settings(Path("/mnt/fmnist"))))
    always = json.loads(json.dumps(manifest))
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    # kube-apiserver v1.34.1's words (the stand-in this replaced had said "Unsupported value").
    assert 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", ' \
        '"Never"' in _dry_run(real_cluster, namespace, always)
    no_completions = json.loads(json.dumps(manifest))
    del no_completions["spec"]["completions"]
    assert "spec.completions: Required value" in _dry_run(real_cluster, namespace,
                                                          no_completions)
    with pytest.raises(UserInputError, match="DNS-1035 label of at most 56"):
        build_indexed_job(_spec(name="fmnist-batch-" + "a" * 50), _settings(Path("/m")))


def test_the_jobs_pods_run_as_the_image_user_with_fs_group_0_on_the_shared_volume():
    """Each pod writes its shard under batch/<job>/ on the shared volume, which the step made:
    the image's user 1000 in group 0 (the step pods' group; KFP gives them no fsGroup,
    kubeflow/pipelines 2.16.0 backend/src/v2/compiler/argocompiler/argo.go 163-176), and
    fsGroup 0 where the volume's driver applies it. The kubernetes client's V1PodSecurityContext
    has the fields (the round trip above keeps every one)."""
    from kubernetes.client import ApiClient

    manifest = to_manifest(build_indexed_job(_spec(), _settings(Path("/mnt/fmnist"))))
    assert to_manifest(ApiClient().deserialize(_Response(manifest), "V1Job")) == manifest
    assert manifest["spec"]["template"]["spec"]["securityContext"] == {
        "runAsUser": 1000, "runAsGroup": 0, "fsGroup": 0, "fsGroupChangePolicy": "OnRootMismatch"}


def test_the_step_makes_the_jobs_directory_group_writable(tmp_path):
    """The step makes batch/<job>/ (its pods write predictions/ there): mode 2775 whatever the
    umask, so that pods of group 0 can write it even when KFP runs the step as another uid
    (PIPELINE_RUN_AS_USER, kubeflow/pipelines 2.15.0 argocompiler/container.go 132-149)."""
    import stat

    mount = tmp_path / "volume"
    mount.mkdir()
    model, data = tmp_path / "model", tmp_path / "data"
    (model / "1").mkdir(parents=True)
    (model / "1" / "saved_model.pb").write_bytes(b"model")
    data.mkdir()
    (data / "metadata.json").write_text(json.dumps({"sha256": {"test": "ab"}}))
    scorer = IndexedJobScorer(_settings(mount), batch_api=object())
    old = os.umask(0o022)
    try:
        remote = scorer.remote_spec(_spec(model_dir=str(model), data_dir=str(data),
                                          output_dir=str(tmp_path / "out")))
    finally:
        os.umask(old)
    for directory in (mount / "batch", mount / "batch" / _spec().name, mount / "datasets"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o2775, directory
    assert remote.model_dir == f"{mount}/batch/{_spec().name}/model"


def test_a_retried_step_never_rewrites_the_model_its_jobs_pods_may_be_loading(tmp_path):
    """A retried step pod stages again, then re-attaches to the Job its first try created
    (same name, HTTP 409): that Job's pods may be loading batch/<job>/model. The second staging
    must leave those files alone (before, it copied over them with overwrite, truncating each
    file a pod had open); the model comes from the same artifact, so the published copy is
    the one to use."""
    mount = tmp_path / "volume"
    mount.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (data / "metadata.json").write_text(json.dumps({"sha256": {"test": "ab"}}))
    scorer = IndexedJobScorer(_settings(mount), batch_api=object())

    def stage(payload: bytes) -> Path:
        model = tmp_path / f"model-{payload[:1].decode()}"
        (model / "1").mkdir(parents=True)
        (model / "1" / "saved_model.pb").write_bytes(payload)
        remote = scorer.remote_spec(_spec(model_dir=str(model), data_dir=str(data),
                                          output_dir=str(tmp_path / "out")))
        return Path(remote.model_dir) / "1" / "saved_model.pb"

    loaded = stage(b"A" * 4096)
    with loaded.open("rb") as pod:  # a pod of the first try's Job is reading the model
        again = stage(b"B" * 4096)  # different bytes, so any rewrite would show
        assert again == loaded
        assert pod.read() == b"A" * 4096
    assert not [p for p in (mount / "batch" / _spec().name).iterdir() if p.name.startswith(".")]


def test_job_state_follows_the_complete_and_failed_conditions():
    job = {"spec": {"completions": 2}, "status": {"succeeded": 1, "active": 1}}
    assert job_state(job) == (False, False, "1/2 shards done, 1 running, 0 failed pods", "")
    job["status"]["conditions"] = [{"type": "Failed", "status": "True",
                                    "reason": "BackoffLimitExceeded", "message": "too many"}]
    assert job_state(job)[:2] == (True, True)
    assert job_state(job)[3] == "BackoffLimitExceeded: too many"


def _runner(lines: list[str]) -> RemoteJobRunner:
    return RemoteJobRunner(poll_seconds=0.2, timeout_seconds=300, log=lines.append)


@pytest.mark.slow
def test_an_indexed_job_scores_every_shard_and_a_retry_reattaches(
        real_cluster, namespace, exported_model, synthetic_dataset, tmp_path):
    """The step's Indexed Job of 2 shards on the real Job controller: each pod scores the shard
    of its completion index into the step's output; a retried step re-attaches to the Job (the
    create answered 409) and starts no second set of pods."""
    from kubernetes import client

    mount = real_cluster.claim_dir(namespace, "fmnist-data")  # the pods mount it here too
    output = tmp_path / "artifact" / "predictions"
    lines: list[str] = []

    def scorer():
        return IndexedJobScorer(_settings(mount, namespace=namespace, cpu="500m",
                                          memory="2Gi"),
                                batch_api=client.BatchV1Api(_as_runner(real_cluster, namespace)),
                                runner=_runner(lines))

    metadata = batch_predict_step(
        model_dir=str(exported_model), data_dir=str(synthetic_dataset),
        output_dir=str(output), workers=2, backend="kubernetes",
        scorer=scorer()).artifact_metadata()
    name = job_name(str(output))
    assert metadata["rows"] == metadata["labelled"] == 500 and metadata["errors"] == 0, lines
    core = client.CoreV1Api(real_cluster.api_client)
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
                  for p in pods) == ["0", "1"]
    assert sorted(p.name for p in output.glob("*.jsonl")) == [
        "predictions-00000-of-00002.jsonl", "predictions-00001-of-00002.jsonl"]
    assert (mount / "batch" / name / "model" / "1" / "saved_model.pb").exists()
    assert f"created Job {namespace}/{name} (Indexed, 2 shard(s))" in lines
    # A retried step pod: the create answers 409 and the runner re-attaches.
    again = batch_predict_step(
        model_dir=str(exported_model), data_dir=str(synthetic_dataset),
        output_dir=str(output), workers=2, backend="kubernetes",
        scorer=scorer()).artifact_metadata()
    assert again["accuracy"] == metadata["accuracy"]
    assert f"re-attaching to the existing Job {namespace}/{name}" in lines
    assert len(core.list_namespaced_pod(
        namespace, label_selector=f"job-name={name}").items) == 2  # no second set of pods


def test_a_failed_job_fails_the_step_with_its_reason_and_is_deleted(real_cluster, namespace,
                                                                  tmp_path):
    """Every shard's pod exits 1 (the image ``scripted-pod``, tests/scripted_pod.py): past the
    Job's backoffLimit the Job controller fails it BackoffLimitExceeded; the step fails with
    that reason and deletes the Job."""
    from kubernetes import client

    real_cluster.script_pods(namespace, {"*": {"exits": [1], "seconds": 0.2}})
    lines: list[str] = []
    (tmp_path / "model").mkdir()
    spec = _spec(model_dir=str(tmp_path / "model"), data_dir="", output_dir=str(tmp_path / "o"))
    # The scripted pods read their script where the settings' default mount path puts the claim.
    scorer = IndexedJobScorer(
        KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace, pvc_name="fmnist-data",
                           cpu="100m", memory="256Mi"),
        batch_api=client.BatchV1Api(_as_runner(real_cluster, namespace)), runner=_runner(lines))
    scorer.remote_spec = lambda s: replace(s, output_dir="/mnt/fmnist/out")  # nothing staged
    with pytest.raises(JobFailed, match="BackoffLimitExceeded"):
        scorer.run(spec)
    assert real_cluster.gone(f"/apis/batch/v1/namespaces/{namespace}/jobs/{spec.name}"), \
        "the failed Job was not deleted"


def test_a_source_the_pods_cannot_read_is_refused_before_anything_is_created(tmp_path):
    scorer = IndexedJobScorer(_settings(tmp_path / "volume"), batch_api=object())  # no calls
    with pytest.raises(UserInputError, match="not where the Job's pods can read it"):
        scorer.run(_spec(source="/home/me/images"))
    with pytest.raises(UserInputError, match="needs the shared claim"):
        IndexedJobScorer(KubernetesSettings(image="x:1", namespace="team-a"))


def test_the_tensorboard_is_created_once_and_reattached_on_a_retry(real_cluster, namespace):
    """On the real API server (Kubeflow's Tensorboard CRD, tests/crds), as the pipeline-runner
    ServiceAccount: created, re-attached on a retry, left in place (it outlives the step);
    one without a logspath refused by the CRD's schema."""
    from kubernetes import client

    lines: list[str] = []
    name = "fmnist-tb-basic-0123456789"
    manifest = build_tensorboard(name, namespace,
                                 "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard")
    custom_api = client.CustomObjectsApi(_as_runner(real_cluster, namespace))
    for _ in range(2):
        ensure_tensorboard(manifest, custom_api=custom_api, runner=_runner(lines))
    from fmnist_kfp.kubernetes.tensorboard import API_VERSION, PLURAL

    stored = real_cluster.read_or_none(
        f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}")
    assert stored is not None and stored["spec"] == manifest["spec"]  # it outlives the step
    assert lines[0].startswith(f"created Tensorboard {namespace}/{name}")
    assert f"re-attaching to the existing Tensorboard {namespace}/{name}" in lines
    broken = {**manifest, "spec": {}}
    broken["metadata"] = {**manifest["metadata"], "name": "fmnist-tb-other"}
    with pytest.raises(Exception, match="logspath"):
        ensure_tensorboard(broken, custom_api=custom_api, runner=_runner(lines))
