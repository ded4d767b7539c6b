"""Local deployments: blessing, blue/green replacement verified over HTTP, rollback, reuse."""

from __future__ import annotations

import os

import httpx
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.deploy.step import (
    DeploymentError,
    deploy,
    serving_problems,
    storage_uri_for,
)
from fmnist_kfp.serving.deploy.client import v1_image_request
from fmnist_kfp.serving.deploy.local_deployer import (
    STATE_DIR_ENV,
    deploy_locally,
    deployments_of,
    running_server,
    start_server,
    state_dir,
    stop_process,
    stop_server,
)
from fmnist_kfp.serving.deploy.rollout_result import Action
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.validation import validate_parameters
from tests.conftest import export_untrained_model
from tests.fixtures import synthetic_split

NAME = "fashion-mnist"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _answers(url: str) -> bool:
    images, _ = synthetic_split(2, seed=1)
    response = httpx.post(f"{url}/v1/models/{NAME}:predict", json=v1_image_request(images))
    return response.status_code == 200


def test_local_deployment_lifecycle(exported_model, synthetic_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("FMNIST_SERVING_STATE_DIR", str(tmp_path / "state"))
    other_model = export_untrained_model(tmp_path / "other", seed=8)
    common = {"data_dir": str(synthetic_dataset), "backend": "local", "model_name": NAME,
              "tolerance": 0.005, "verification_images": 32, "serving": {}, "model_uri": ""}
    try:
        first = deploy(model_dir=str(exported_model), test_accuracy=0.90, **common)
        assert first.action is Action.CREATED and first.blessing.serving_accuracy is None
        assert first.verification.passed and first.verification.report["ok"]
        assert first.verification.report["unexplained_disagreements"] == 0
        report = first.verification.report
        assert report["failures"] == 0 and report["images"] == 32
        # The record the step hands to KFP, as local deployments always wrote it.
        assert list(first.record()) == ["name", "backend", "blessing", "previous_url", "action",
                                        "url", "verification"]
        assert first.record()["verification"] == {**report, "passed": True}
        served = running_server(NAME)
        assert served.url == first.url and served.test_accuracy == 0.90
        assert _answers(first.url)

        # The same model again (a cached pipeline run): the running server is reused.
        again = deploy(model_dir=str(exported_model), test_accuracy=0.90, **common)
        assert again.action is Action.UNCHANGED and again.url == first.url
        assert running_server(NAME).pid == served.pid

        # Worse than the serving model beyond the tolerance: not deployed.
        rejected = deploy(model_dir=str(other_model), test_accuracy=0.80, **common)
        assert rejected.action is Action.REJECTED and rejected.url == first.url
        assert rejected.blessing.as_dict() == {
            "blessed": False, "candidate_accuracy": 0.80, "serving_accuracy": 0.90,
            "tolerance": 0.005, "reason": rejected.blessing.reason}
        assert rejected.verification is None and rejected.record()["verification"] == {}
        assert running_server(NAME).pid == served.pid

        # Blessed, but the new server fails its check: it is stopped, the old one stays.
        checked = []

        def failing_verify(url):
            checked.append(url)
            return {"ok": url == first.url, "accuracy": 0.0}

        rolled_back = deploy_locally(NAME, str(other_model), 0.95, tolerance=0.005,
                                     verify=failing_verify, log=lambda message: None)
        assert rolled_back.action is Action.ROLLED_BACK and rolled_back.url == first.url
        assert len(checked) == 1 and checked[0] != first.url
        assert running_server(NAME).pid == served.pid and _answers(first.url)
        with pytest.raises(httpx.HTTPError):
            httpx.get(checked[0], timeout=2)

        # Blessed and verified: the new server replaces the old one.
        promoted = deploy(model_dir=str(other_model), test_accuracy=0.95, **common)
        assert promoted.action is Action.PROMOTED and promoted.url != first.url
        assert promoted.blessing.serving_accuracy == 0.90
        assert running_server(NAME).test_accuracy == 0.95
        assert not _alive(served.pid)
        assert _answers(promoted.url)
    finally:
        stop_server(NAME)
    assert running_server(NAME) is None


def test_two_pipeline_roots_keep_their_local_deployments_apart(exported_model,
                                                               synthetic_dataset, tmp_path,
                                                               monkeypatch):
    """Two projects on one machine, each with its own pipeline root, deploy a model of the
    same name: each is a first deployment ("created"), not blessed against the other's; the
    CLI, as a user runs it, stops one root's and leaves the other's serving. Before, every
    root shared ~/.cache/fmnist-kfp/serving: the second run was compared with the first
    project's model, and `deployment stop` stopped it."""
    import json
    import subprocess
    import sys

    monkeypatch.delenv(STATE_DIR_ENV, raising=False)  # each root's own, as `run --local` has
    roots = {"a": tmp_path / "project-a" / "runs", "b": tmp_path / "project-b" / "runs"}
    models = {"a": str(exported_model),
              "b": str(export_untrained_model(tmp_path / "other", seed=8))}
    common = {"data_dir": str(synthetic_dataset), "backend": "local", "model_name": NAME,
              "tolerance": 0.005, "verification_images": 16, "serving": {}, "model_uri": ""}
    env = {k: v for k, v in os.environ.items() if k != STATE_DIR_ENV}

    def cli(*args: str, root) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fmnist_kfp.cli", "deployment", *args,
                               "--name", NAME, "--pipeline-root", str(root)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    urls = {}
    try:
        for key in ("a", "b"):
            with deployments_of(str(roots[key])) as kept:
                decision = deploy(model_dir=models[key], test_accuracy=0.90, **common)
            assert kept == roots[key].resolve() / "deployments"
            assert decision.action is Action.CREATED, decision  # nothing of its own served
            urls[key] = decision.url
        assert urls["a"] != urls["b"]
        stopped = cli("stop", root=roots["a"])
        assert stopped.stdout.strip() == f"stopped {NAME}", stopped.stderr
        with pytest.raises(httpx.TransportError):
            _answers(urls["a"])
        assert _answers(urls["b"])  # the other project's server serves on
        status = cli("status", root=roots["b"])
        assert json.loads(status.stdout)["url"] == urls["b"]
        assert cli("status", root=roots["a"]).returncode == 1
    finally:
        for root in roots.values():
            with deployments_of(str(root)):
                stop_server(NAME)


def test_a_started_server_binds_its_own_port_and_reports_it(exported_model, tmp_path,
                                                           monkeypatch):
    """No port is picked and released before the server binds it (another process could
    take it in between): the server binds port 0 and reports the port it got."""
    import psutil

    monkeypatch.setenv("FMNIST_SERVING_STATE_DIR", str(tmp_path / "state"))
    server = start_server(NAME, str(exported_model))
    try:
        listening = [c for c in psutil.Process(server.pid).connections()
                     if c.status == psutil.CONN_LISTEN]
        assert server.port in {c.laddr.port for c in listening}
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert _answers(server.url)
        assert not list(state_dir().glob("*.ports.json"))  # read and removed
    finally:
        stop_process(server.pid)
    assert not _alive(server.pid)


def test_a_failed_rollout_fails_the_deploy_step(exported_model, synthetic_dataset, tmp_path,
                                                monkeypatch):
    import fmnist_kfp.serving.deploy.verification

    monkeypatch.setenv("FMNIST_SERVING_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(fmnist_kfp.serving.deploy.verification, "compare",
                        lambda *args, **kwargs: {"ok": False, "agreement": 0.0, "requests": 1,
                                                 "failures": 1, "accuracy": 0.0})
    with pytest.raises(DeploymentError, match="failed verification"):
        deploy(model_dir=str(exported_model), model_uri="", test_accuracy=0.9,
               data_dir=str(synthetic_dataset), backend="local", model_name=NAME,
               tolerance=0.0, verification_images=4, serving={})
    assert running_server(NAME) is None


def test_a_verifier_that_raises_stops_the_new_server(exported_model, tmp_path, monkeypatch):
    monkeypatch.setenv("FMNIST_SERVING_STATE_DIR", str(tmp_path / "state"))
    urls = []

    def broken_verify(url):
        urls.append(url)
        raise ConnectionError("the verifier lost its network")

    decision = deploy_locally(NAME, str(exported_model), 0.9, tolerance=0.0,
                              verify=broken_verify, log=lambda message: None)
    assert decision.action is Action.FAILED and not decision.verification.passed
    assert "lost its network" in decision.record()["verification"]["error"]
    with pytest.raises(httpx.HTTPError):
        httpx.get(urls[0], timeout=2)
    assert running_server(NAME) is None


@pytest.mark.parametrize(
    ("serving", "tolerance", "images", "message"),
    [
        ({"canary": 10}, 0.005, 10, "unknown serving settings ['canary']"),
        ({}, 1.5, 10, "blessing tolerance 1.5 is not an accuracy difference"),
        ({}, 0.005, 0, "verification_images must be at least 1"),
        ({"max_batch_size": 0}, 0.005, 10, "max_batch_size"),
    ],
)
def test_bad_serving_parameters_are_named(serving, tolerance, images, message):
    problems = serving_problems(serving, "local", NAME, tolerance, images)
    assert any(message in problem for problem in problems), problems
    with pytest.raises(UserInputError, match="serving|tolerance|verification|batch"):
        validate_parameters(PipelineParameters(serving=serving, blessing_tolerance=tolerance,
                           verification_images=images), check_data=False)


def test_kubernetes_serving_settings_are_checked_before_any_work():
    problems = serving_problems({"runtime": "triton", "storage_uri": "/mnt/models"},
                                "kubernetes", NAME, 0.005, 10)
    assert any("runtime" in problem for problem in problems), problems
    assert not serving_problems({"runtime": "tensorflow", "canary_traffic_percent": 20},
                                "kubernetes", NAME, 0.005, 10)


@pytest.mark.parametrize(
    ("artifact_uri", "override", "expected"),
    [
        ("minio://mlpipeline/v2/artifacts/run/select/best_model", "",
         "s3://mlpipeline/v2/artifacts/run/select/best_model"),
        ("gs://bucket/pipeline/best_model", "", "gs://bucket/pipeline/best_model"),
        ("s3://bucket/best_model", "pvc://fmnist-data/models/best",
         "pvc://fmnist-data/models/best"),
    ],
)
def test_storage_uri_comes_from_the_model_artifact(artifact_uri, override, expected):
    assert storage_uri_for(artifact_uri, override) == expected


def test_a_local_artifact_path_cannot_be_served_by_kserve():
    with pytest.raises(UserInputError, match="set serving.storage_uri"):
        storage_uri_for("/tmp/runs/best_model")
