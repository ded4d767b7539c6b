"""TensorBoard: the logs a training job writes, the Kubeflow ``Tensorboard`` the training step
points at them (checked against its CRD), and ``fmnist-kfp tensorboard`` serving them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
import yaml

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.train.step import publish_tensorboard, tensorboard_markdown
from fmnist_kfp.kubernetes.tensorboard import build_tensorboard, dashboard_path, logs_path
from fmnist_kfp.settings.jobs import KubernetesSettings
from tests import ROOT
from tests.crd_schemas import _strict

CRD = ROOT / "tests" / "crds" / "tensorboard.kubeflow.org_tensorboards.yaml"


def tensorboard_schema() -> dict:
    """The served v1alpha1 schema of kubeflow/kubeflow v1.10.0's CRD (tests/crds/SOURCE.md),
    strict as the API server's field validation is."""
    document = yaml.safe_load(CRD.read_text())
    assert document["metadata"]["name"] == "tensorboards.tensorboard.kubeflow.org"
    [version] = [v for v in document["spec"]["versions"] if v["served"]]
    assert (document["spec"]["group"], version["name"]) == ("tensorboard.kubeflow.org",
                                                             "v1alpha1")
    return _strict(version["schema"]["openAPIV3Schema"])


def test_the_tensorboard_resource_is_what_its_crd_accepts():
    manifest = build_tensorboard("fmnist-tb-basic-0123456789", "team-a",
                                 "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard")
    jsonschema.validate(manifest, tensorboard_schema())
    assert manifest["apiVersion"] == "tensorboard.kubeflow.org/v1alpha1"
    assert manifest["kind"] == "Tensorboard"
    # What the schema rejects, so the check above can fail: no logspath, an unknown field.
    for broken in ({**manifest, "spec": {}}, {**manifest, "spec": {"logsPath": "pvc://x"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, tensorboard_schema())


def test_logs_path_takes_the_forms_the_controller_mounts():
    """kubeflow/kubeflow v1.10.0 components/tensorboard-controller/controllers/
    tensorboard_controller.go: pvc://<claim>/<subpath> (isPVCPath, extractPVCName,
    extractPVCSubPath) mounts the claim's subpath; gs:// and s3:// go to --logdir as they are
    (isCloudPath)."""
    assert logs_path("/mnt/fmnist/jobs/fmnist-basic-1/tensorboard", pvc_name="fmnist-data",
                     mount_path="/mnt/fmnist/") == \
        "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard"
    assert logs_path("gs://bucket/logs") == "gs://bucket/logs"
    assert logs_path("minio://mlpipeline/v2/artifacts/x/tensorboard") == \
        "s3://mlpipeline/v2/artifacts/x/tensorboard"
    with pytest.raises(UserInputError, match="set kubernetes.pvc_name"):
        logs_path("/tmp/job/tensorboard", pvc_name="fmnist-data", mount_path="/mnt/fmnist")
    with pytest.raises(UserInputError, match="neither on the shared claim"):
        logs_path("/mnt/fmnist-other/x", pvc_name="fmnist-data", mount_path="/mnt/fmnist")
    with pytest.raises(UserInputError, match="DNS-1035"):
        build_tensorboard("Fmnist_TB", "team-a", "pvc://fmnist-data/x")


def test_the_training_step_creates_its_tensorboard_and_links_it():
    created = []
    info = publish_tensorboard("fmnist-tb-basic-0123456789", "/mnt/fmnist/jobs/fmnist-basic-1",
                               KubernetesSettings(namespace="team-a", pvc_name="fmnist-data"),
                               create=created.append)
    [manifest] = created
    jsonschema.validate(manifest, tensorboard_schema())
    assert manifest["metadata"]["namespace"] == "team-a"
    assert info["logspath"] == "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard"
    # The controller's VirtualService prefix (generateVirtualService): /tensorboard/<ns>/<name>/
    assert info["url"] == dashboard_path("team-a", "fmnist-tb-basic-0123456789") == \
        "/tensorboard/team-a/fmnist-tb-basic-0123456789/"
    markdown = tensorboard_markdown("basic", info)
    assert "[Open TensorBoard](/tensorboard/team-a/fmnist-tb-basic-0123456789/)" in markdown
    local = tensorboard_markdown("basic", {"logs": "/runs/x/model/tensorboard"})
    assert "`/runs/x/model/tensorboard`" in local and "fmnist-kfp tensorboard" in local


def _tags(directory: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return accumulator.Tags()


def wait_for_scalars(url: str, process: subprocess.Popen, timeout: float = 180.0) -> dict:
    """TensorBoard's scalars data API once it answers 200 (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            response = httpx.get(f"{url}/data/plugin/scalars/tags", timeout=5)
            if response.status_code == 200 and response.json():
                return response.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard at {url} did not serve scalars within {timeout:.0f} s")


def served_scalar_tags(arguments: list[str]) -> dict:
    """``fmnist-kfp tensorboard`` in a subprocess on a free loopback port: the scalar tags its
    data API serves (it is stopped afterwards)."""
    from fmnist_kfp.launcher.local_processes import free_ports

    [port] = free_ports(1)
    process = subprocess.Popen(
        [sys.executable, "-m", "fmnist_kfp.cli", "tensorboard", *arguments, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        return wait_for_scalars(f"http://127.0.0.1:{port}", process)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
def test_a_two_worker_job_logs_once_from_the_chief_and_tensorboard_serves_it(
        synthetic_dataset, tmp_path):
    """Under MultiWorkerMirroredStrategy only the chief writes (no workertemp_ directories of
    other workers): per-epoch scalars for training and validation, the graph, and the profile
    that profile_steps asks for. Then fmnist-kfp tensorboard serves them on 127.0.0.1."""
    from fmnist_kfp.kfp_components.train.step import training_backend
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    work = tmp_path / "model"
    spec = TrainingJobSpec(
        name="test-tensorboard",
        config=TrainingConfig(model_type="batchnorm", epochs=2, batch_size=32,
                              profile_steps=2),
        data_dir=str(synthetic_dataset), export_dir=str(work / "1"), work_dir=str(work),
        num_workers=2)
    training_backend("local", {}).run(spec)
    logs = work / "tensorboard"
    assert sorted(p.name for p in logs.iterdir()) == ["plugins", "train", "validation"]
    assert len(list((logs / "train").glob("events.out.tfevents.*"))) == 1  # one writer
    train, validation = _tags(logs / "train"), _tags(logs / "validation")
    assert {"epoch_loss", "epoch_accuracy"} <= set(train["tensors"])
    assert {"epoch_loss", "epoch_accuracy"} <= set(validation["tensors"])
    assert train["graph"], "the train graph was not written"
    assert list((logs / "plugins" / "profile").rglob("*.xplane.pb")), "no profile"

    tags = served_scalar_tags(["--logdir", str(logs)])
    assert "epoch_loss" in tags["train"] and "epoch_accuracy" in tags["validation"]


def test_tensorboard_without_a_run_says_what_to_do(tmp_path, capsys):
    from fmnist_kfp.cli import main as cli_main

    code = cli_main(["tensorboard", "--summary", str(tmp_path / "summary.json")])
    assert code == 2
    assert "run the pipeline first (make run) or pass --logdir" in capsys.readouterr().err


def test_a_cluster_without_the_tensorboard_crd_still_trains_and_says_so():
    from fmnist_kfp.kubernetes.runner import JobRefused

    def refuse(manifest):
        raise JobRefused("the API server refused to create Tensorboard team-a/x: HTTP 404 "
                         "Not Found", 404)

    info = publish_tensorboard("fmnist-tb-basic-0123456789", "/mnt/fmnist/jobs/fmnist-basic-1",
                               KubernetesSettings(namespace="team-a", pvc_name="fmnist-data"),
                               create=refuse)
    assert "url" not in info and "HTTP 404" in info["error"]
    markdown = tensorboard_markdown("basic", info)
    assert "could not be created" in markdown
    assert "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard" in markdown
