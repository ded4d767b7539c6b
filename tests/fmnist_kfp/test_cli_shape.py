"""The command line's shape: each command and each ``schedule`` action offers the flags it
uses and refuses the others (argparse: exit 2, naming the flag), and the commands that send
the pipeline to Kubeflow need no checkout (they compile it for the images given)."""

from __future__ import annotations

import pytest
import yaml

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.schema import flag

PIPELINE_FLAGS = [flag(name) for name in PipelineParameters.specs()]
ENDPOINT_FLAGS = ["--host", "--namespace", "--token-file", "--kfp-backend-version"]
PACKAGE_FLAGS = ["--image", "--gpu-image", "--package"]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli_main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _flags(text: str) -> set[str]:
    """The long flags a help text offers."""
    return {word.strip("[],") for line in text.splitlines() for word in line.split()
            if word.strip("[],").startswith("--")}


def _refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli_main(list(argv))
    assert done.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("command", "offered", "absent"), [
    (("schedule", "create"),
     [*ENDPOINT_FLAGS, *PACKAGE_FLAGS, *PIPELINE_FLAGS, "--experiment", "--name", "--cron",
      "--max-concurrency", "--catchup"], ["--id"]),
    (("schedule", "list"), [*ENDPOINT_FLAGS, "--experiment"],
     ["--id", "--cron", "--catchup", "--name", *PACKAGE_FLAGS, *PIPELINE_FLAGS]),
    (("schedule", "disable"), [*ENDPOINT_FLAGS, "--id"],
     ["--experiment", "--cron", *PACKAGE_FLAGS, *PIPELINE_FLAGS]),
    (("upload",), [*ENDPOINT_FLAGS, *PACKAGE_FLAGS, "--name", "--version", "--description"],
     ["--experiment", *PIPELINE_FLAGS]),
    (("preflight",), [*ENDPOINT_FLAGS, "--kubeconfig", "--context", "--scheduling", "--operator"],
     ["--experiment", *PACKAGE_FLAGS, *PIPELINE_FLAGS]),
    (("compile",), ["--output-dir", "--image", "--gpu-image"],
     ["--package", *ENDPOINT_FLAGS, *PIPELINE_FLAGS]),
    (("run",), [*ENDPOINT_FLAGS, *PACKAGE_FLAGS, *PIPELINE_FLAGS, "--local", "--experiment",
                "--run-name", "--wait", "--pipeline-root", "--summary", "--no-cache"], []),
], ids=lambda value: " ".join(value) if isinstance(value, tuple) else None)
def test_each_command_offers_only_the_flags_it_uses(command, offered, absent, capsys):
    flags = _flags(_help(capsys, *command))
    assert set(offered) <= flags, sorted(set(offered) - flags)
    assert not set(absent) & flags, sorted(set(absent) & flags)


def test_schedule_create_help_has_no_id(capsys):
    assert "--id" not in _help(capsys, "schedule", "create")


def test_schedule_help_names_the_actions(capsys):
    text = _help(capsys, "schedule")
    assert "{create,list,disable}" in text and "--epochs" not in text


@pytest.mark.parametrize(("argv", "named"), [
    (["schedule", "list", "--host", "http://127.0.0.1:9", "--epochs", "3"], "--epochs"),
    (["schedule", "list", "--host", "http://127.0.0.1:9", "--cron", "0 3 * * *"], "--cron"),
    (["schedule", "create", "--host", "http://127.0.0.1:9", "--cron", "0 3 * * *", "--id",
      "x"], "--id"),
    (["schedule", "disable", "--host", "http://127.0.0.1:9", "--id", "x", "--package", "p"],
     "--package"),
    (["upload", "--host", "http://127.0.0.1:9", "--epochs", "3"], "--epochs"),
    (["upload", "--host", "http://127.0.0.1:9", "--experiment", "e"], "--experiment"),
    (["preflight", "--host", "http://127.0.0.1:9", "--package", "p"], "--package"),
    (["preflight", "--host", "http://127.0.0.1:9", "--experiment", "e"], "--experiment"),
])
def test_a_flag_the_action_does_not_use_is_refused(argv, named, capsys):
    error = _refused(capsys, *argv)
    assert "unrecognized arguments" in error and named in error


@pytest.mark.parametrize(("argv", "error"), [
    (["schedule", "create", "--host", "http://127.0.0.1:9"], "required: --cron"),
    (["schedule", "disable", "--host", "http://127.0.0.1:9"], "required: --id"),
    (["schedule", "list"], "required: --host"),
])
def test_what_an_action_needs_is_required(argv, error, capsys):
    assert error in _refused(capsys, *argv)


@pytest.mark.parametrize("command", [
    ["run"], ["upload"], ["schedule", "create", "--cron", "0 3 * * *"]])
def test_outside_the_checkout_the_pipeline_is_compiled_and_the_host_is_what_fails(
        command, tmp_path, monkeypatch, capsys):
    """No compiled/ here: the pipeline is compiled for the images (in a temporary file) before
    anything is sent, so what fails is the unreachable host, not a missing file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KF_PIPELINES_TOKEN", raising=False)
    code = cli_main([*command, "--host", "http://127.0.0.1:9", "--kfp-backend-version",
                     "2.15.0", "--image", "registry.example/fmnist:1.0"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "cannot reach Kubeflow Pipelines at http://127.0.0.1:9" in err
    assert "not found" not in err and "make compile" not in err
    assert not list(tmp_path.iterdir())  # nothing left behind


def test_run_without_an_image_compiles_for_the_default_outside_the_checkout(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli_main(["run", "--host", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Kubeflow Pipelines" in err and "not found" not in err


def test_compile_writes_the_pipeline_for_the_images_given(tmp_path, capsys):
    image, gpu = "registry.example/team/fmnist:7.1", "registry.example/team/fmnist:7.1-cuda"
    assert cli_main(["compile", "--output-dir", str(tmp_path), "--image", image,
                     "--gpu-image", gpu]) == 0, capsys.readouterr().err
    assert f"wrote {tmp_path / 'fashion_mnist_pipeline.yaml'}" in capsys.readouterr().out
    text = (tmp_path / "fashion_mnist_pipeline.yaml").read_text()
    spec = next(yaml.safe_load_all(text))
    executors = spec["deploymentSpec"]["executors"].values()
    assert {executor["container"]["image"] for executor in executors} == {image}
    assert gpu in text
