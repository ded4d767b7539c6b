"""Client commands against a local HTTP stand-in of the KFP REST API. These tests check what we
send to Kubeflow Pipelines (runs, uploads, recurring runs, the token); no pipeline runs."""

from __future__ import annotations

import json

import pytest

from fmnist.app.cli import main as cli_main
from fmnist.app.kfp_client import cron_expression
from fmnist.errors import UserInputError
from tests.kfp_standin import API, KfpStandIn

PACKAGE = "compiled/fashion_mnist_pipeline.yaml"


def _json(output: str):
    """Our JSON, after the 'Experiment details: <url>' lines kfp.Client prints."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line[:1] in "{[")
    return json.loads("\n".join(lines[start:]))


@pytest.fixture()
def kfp_api(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no context file of the developer's
    monkeypatch.setenv("KF_PIPELINES_TOKEN", "secret-token-123")
    with KfpStandIn() as standin:
        yield standin


def test_run_creates_a_run_in_the_experiment_with_only_the_given_parameters(kfp_api, capsys):
    code = cli_main(["run", "--host", kfp_api.url, "--experiment", "nightly", "--epochs", "3",
                     "--num-workers", "4", "--gpus-per-worker", "1", "--wait"])
    assert code == 0, capsys.readouterr().err
    output = capsys.readouterr().out
    assert _json(output) == {"run_id": "run-1", "experiment": "nightly",
                                  "state": "SUCCEEDED"}
    assert "secret-token-123" not in output
    created = kfp_api.find("POST", f"{API}/experiments")
    assert created[0]["body"]["display_name"] == "nightly"
    run = kfp_api.find("POST", f"{API}/runs")[0]
    assert run["authorization"] == "Bearer secret-token-123"
    assert run["body"]["experiment_id"] == "exp-1"
    assert run["body"]["runtime_config"]["parameters"] == {
        "epochs": 3, "num_workers": 4, "gpus_per_worker": 1, "backend": "kubernetes"}
    spec = run["body"]["pipeline_spec"]
    spec = spec.get("pipeline_spec", spec)  # the pipeline and its platform config
    assert spec["pipelineInfo"]["name"] == "fashion-mnist-training"
    assert kfp_api.find("GET", f"{API}/runs/run-1")  # waited for the outcome


def test_upload_creates_the_pipeline_then_adds_versions(kfp_api, capsys):
    assert cli_main(["upload", "--host", kfp_api.url, "--name", "fmnist"]) == 0
    first = _json(capsys.readouterr().out)
    assert first["created"] is True and first["pipeline_id"] == "pipeline-1"
    assert kfp_api.find("POST", f"{API}/pipelines/upload")[0]["query"]["name"] == "fmnist"

    assert cli_main(["upload", "--host", kfp_api.url, "--name", "fmnist",
                     "--version", "v0.1.1"]) == 0
    second = _json(capsys.readouterr().out)
    assert second == {"pipeline_id": "pipeline-1", "created": False, "version_id": "version-2"}
    version = kfp_api.find("POST", f"{API}/pipelines/upload_version")[0]
    assert version["query"]["name"] == "v0.1.1" and version["query"]["pipelineid"] == "pipeline-1"
    assert b"fashion-mnist-training" in version["raw"]  # the compiled package itself


def test_schedule_creates_lists_and_disables_a_recurring_run(kfp_api, capsys):
    assert cli_main(["schedule", "create", "--host", kfp_api.url, "--cron", "0 3 * * *",
                     "--max-concurrency", "2", "--epochs", "8"]) == 0
    created = _json(capsys.readouterr().out)
    assert created == {"recurring_run_id": "recurring-1", "cron": "0 0 3 * * *"}
    body = kfp_api.find("POST", f"{API}/recurringruns")[0]["body"]
    assert body["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert body["max_concurrency"] == "2" or body["max_concurrency"] == 2
    assert body["no_catchup"] is True  # catch-up is off unless asked for
    assert body["runtime_config"]["parameters"]["epochs"] == 8

    assert cli_main(["schedule", "list", "--host", kfp_api.url]) == 0
    listed = _json(capsys.readouterr().out)
    assert listed[0]["id"] == "recurring-1" and listed[0]["cron"] == "0 0 3 * * *"

    assert cli_main(["schedule", "disable", "--host", kfp_api.url, "--id", "recurring-1"]) == 0
    assert kfp_api.find("POST", f"{API}/recurringruns/recurring-1:disable")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["run", "--host", "kubeflow.example.com"], "is not a URL"),
        (["schedule", "create", "--host", "http://127.0.0.1:9", "--cron", "every day"],
         "cron 'every day' is malformed"),
        (["run", "--host", "http://127.0.0.1:9", "--num-workers", "0", "--gpus-per-worker", "1"],
         "GPUs were asked for, but no worker would use them"),
        (["run", "--host", "http://127.0.0.1:9", "--kubernetes", '{"namespce": "a"}'],
         "unknown kubernetes settings ['namespce']"),
    ],
)
def test_bad_input_fails_before_any_request(arguments, message, capsys):
    assert cli_main(arguments) == 2
    assert message in capsys.readouterr().err


def test_cron_accepts_five_or_six_fields():
    assert cron_expression("*/15 * * * *") == "0 */15 * * * *"
    assert cron_expression("0 0 9 ? * 2-6") == "0 0 9 ? * 2-6"
    with pytest.raises(UserInputError):
        cron_expression("0 3 * *")
