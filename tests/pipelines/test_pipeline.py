"""The pipeline: compiled YAML in sync with the code, and end-to-end kfp.local runs."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.local_run import run_local
from fmnist_kfp.pipelines.compile import COMPILED_DIR, compile_all
from fmnist_kfp.settings.pipeline import PipelineParameters
from tests import ROOT
from tests.pipelines.conftest import NOON


def test_compiled_yaml_matches_a_fresh_compile(tmp_path):
    """compiled/ is what users upload and releases ship: it must be what the code compiles to.
    On failure run `make compile` and commit the result."""
    fresh = compile_all(str(tmp_path))
    assert fresh, "nothing compiled"
    for path in fresh:
        committed = ROOT / COMPILED_DIR / os.path.relpath(path, tmp_path)
        assert committed.exists(), f"{committed.name} is not committed; run `make compile`"
        assert Path(path).read_text() == committed.read_text(), (
            f"{committed.name} is stale; run `make compile` and commit it"
        )


def test_compiled_pipeline_loads_back_with_the_kfp_sdk():
    from kfp import components

    pipeline = components.load_component_from_file(
        str(ROOT / COMPILED_DIR / "fashion_mnist_pipeline.yaml")
    )
    assert pipeline.name == "fashion-mnist-training"
    assert {"epochs", "backend", "kubernetes"} <= set(pipeline.component_spec.inputs)
    assert set(pipeline.component_spec.outputs) == {
        "best_model", "report", "report_markdown", "best_model_type", "deployment",
        "serving_url", "served_accuracy", "batch_predictions"}
    platform = pipeline.platform_spec.platforms["kubernetes"]
    assert "exec-train-model" in platform.deployment_spec.executors


def test_every_compiled_component_loads_back_with_its_image_and_no_env():
    """Other pipelines load the components from compiled/components/. A component runs the
    compiled image and carries no container env (KFP 2.17 loads env back as a list, which its
    compiler cannot compile: tests/compiled/test_compiled_components.py); the steps that create pods
    take their images as inputs whose defaults are the compiled images."""
    from kfp import components

    from fmnist_kfp.kfp_components.registry import COMPONENTS
    from fmnist_kfp.settings.platform import JobImages

    images = JobImages.chosen()
    for component in COMPONENTS.values():
        path = ROOT / COMPILED_DIR / "components" / f"{component.component_spec.name}.yaml"
        loaded = components.load_component_from_file(str(path))
        assert loaded.component_spec.inputs.keys() == component.component_spec.inputs.keys()
        container = loaded.component_spec.implementation.container
        assert container.image == images.image and container.env is None
        for name in ("image", "gpu_image"):
            if name in loaded.component_spec.inputs:
                assert loaded.component_spec.inputs[name].default == getattr(images, name)


def test_every_step_imports_inside_a_pipeline_pod():
    """A KFP pod runs with _KFP_RUNTIME=true, where kfp.dsl cannot build components: the
    component body imports only its step, which must not drag the components in."""
    import subprocess
    import sys

    steps = sorted((ROOT / "kfp_components").glob("*/step.py"))
    assert len(steps) == 8  # every folder but freshness, whose component calls the core
    script = "; ".join(f"import fmnist_kfp.kfp_components.{step.parent.name}.step"
                       for step in steps)
    result = subprocess.run([sys.executable, "-c", script], env={**os.environ,
                            "_KFP_RUNTIME": "true"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_an_untagged_component_image_fails_the_compile(monkeypatch):
    from fmnist_kfp.errors import UserInputError
    from fmnist_kfp.settings.platform import component_image

    monkeypatch.setenv("FMNIST_COMPONENT_IMAGE", "registry.example.com:5000/fmnist")
    with pytest.raises(UserInputError, match="has no tag"):
        component_image()


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("image", "gpu", "expected"), [
    ("registry.example.com:5000/ml/fmnist-kfp:0.2.0", "",
     "registry.example.com:5000/ml/fmnist-kfp:0.2.0-gpu"),  # the release workflow's name
    ("r.example/fmnist:0.2.0", "r.example/fmnist-cuda:7", "r.example/fmnist-cuda:7"),
    (f"r.example/fmnist:0.2.0@{DIGEST}", f"r.example/fmnist:0.2.0-gpu@{DIGEST}",
     f"r.example/fmnist:0.2.0-gpu@{DIGEST}"),
])
def test_the_gpu_image_is_given_or_derived_from_the_component_images_tag(monkeypatch, image,
                                                                          gpu, expected):
    from fmnist_kfp.settings.platform import Platform, gpu_image

    monkeypatch.setenv("FMNIST_COMPONENT_IMAGE", image)
    monkeypatch.setenv("FMNIST_GPU_IMAGE", gpu)
    assert gpu_image() == expected
    assert Platform.from_env().gpu_image == expected


@pytest.mark.parametrize("image", [f"r.example/fmnist@{DIGEST}",
                                   f"r.example:5000/fmnist:0.2.0@{DIGEST}"])
def test_a_digest_pinned_component_image_needs_the_gpu_image_named(monkeypatch, image):
    """A digest is one image's: the GPU image's cannot be derived from the CPU image's."""
    from fmnist_kfp.errors import UserInputError
    from fmnist_kfp.settings.platform import gpu_image

    monkeypatch.setenv("FMNIST_COMPONENT_IMAGE", image)
    monkeypatch.delenv("FMNIST_GPU_IMAGE", raising=False)
    with pytest.raises(UserInputError, match="pinned by digest.*give the GPU image as well"):
        gpu_image()
    monkeypatch.setenv("FMNIST_GPU_IMAGE", "r.example/fmnist-gpu")
    with pytest.raises(UserInputError, match="FMNIST_GPU_IMAGE='r.example/fmnist-gpu' has no tag"):
        gpu_image()


def _task(spec: dict, name: str) -> dict:
    """A task of the compiled pipeline by name, wherever it sits (root, loop or branch)."""
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    found = [dag["tasks"][name] for dag in dags if name in dag["tasks"]]
    assert len(found) == 1, f"{len(found)} tasks named {name}"
    return found[0]


def test_compiled_pipeline_documents_parameters_and_caches_the_right_steps():
    spec, platform = yaml.safe_load_all(
        (ROOT / COMPILED_DIR / "fashion_mnist_pipeline.yaml").read_text()
    )
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert {"data_source", "freshness", "model_types", "epochs", "num_workers"} <= set(parameters)
    assert all(p.get("description") for p in parameters.values()), "undocumented parameter"
    assert "MultiWorkerMirroredStrategy" in spec["pipelineInfo"]["description"]
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["freshness-window"]["cachingOptions"] == {}  # reads the clock: never cached
    assert tasks["ingest-fashion-mnist"]["cachingOptions"]["enableCache"] is True
    assert _task(spec, "select-best-model")["cachingOptions"]["enableCache"] is True
    # Deploying and measuring the live server have effects: never served from cache.
    assert tasks["deploy-model"]["cachingOptions"] == {}
    assert tasks["predict-with-served-model"]["cachingOptions"] == {}
    predict_inputs = tasks["predict-with-served-model"]["inputs"]["parameters"]
    assert predict_inputs["url"]["taskOutputParameter"] == {"outputParameterKey": "url",
                                                            "producerTask": "deploy-model"}
    assert {"model_name", "blessing_tolerance", "serving"} <= set(parameters)
    assert _task(spec, "train-model")["cachingOptions"]["enableCache"] is True
    assert "/work/" not in yaml.safe_dump(spec) and "/home/" not in yaml.safe_dump(spec)
    # The Kubeflow variant: TFJobs by default, shared volume and credentials from a Secret.
    defaults = {name: p.get("defaultValue") for name, p in parameters.items()}
    assert defaults["backend"] == "kubernetes" and defaults["num_workers"] == 2
    # The strategy settings reach the train and tune steps (PS replicas for Katib trials too).
    assert defaults["strategy"] == "multi_worker_mirrored" and defaults["num_ps"] == 1
    assert defaults["evaluator"] is False
    train_inputs = _task(spec, "train-model")["inputs"]["parameters"]
    tune_inputs = _task(spec, "tune-hyperparameters")["inputs"]["parameters"]
    assert {"strategy", "num_ps", "evaluator"} <= set(train_inputs)
    assert {"strategy", "num_ps"} <= set(tune_inputs)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    train = executors["exec-train-model"]
    assert train["pvcMount"][0]["mountPath"] == "/mnt/fmnist"
    # The claim is the platform's, carried by every task; the user's kubernetes dict (empty by
    # default) is merged over it by the steps, so it cannot drop it.
    assert defaults["kubernetes"] == {}
    train_env = {e["name"]: e["value"]
                 for e in spec["deploymentSpec"]["executors"]["exec-train-model"]["container"][
                     "env"]}
    assert train["pvcMount"][0]["constant"] == train_env["FMNIST_PVC_NAME"]
    # No Secret unless FMNIST_CREDENTIALS_SECRET names one: KFP backends before 2.15.0 drop
    # `optional` (tests/serving/deploy/test_deploy_safeguards.py).
    assert not any("secretAsEnv" in executor for executor in executors.values())
    # Tuning: off by default; each model's search step feeds its training step (handing the
    # given values on when off), is cached, and its Katib trials share the volume.
    assert defaults["tune"] is False and defaults["tuning"] == {}
    search = _task(spec, "tune-hyperparameters")
    assert search["cachingOptions"]["enableCache"] is True
    assert search["inputs"]["parameters"]["enabled"]["componentInputParameter"].endswith("tune")
    training = _task(spec, "train-model")["inputs"]["parameters"]
    # The tuned hyperparameters travel as one typed value from tune to train.
    assert training["hyperparameters"]["taskOutputParameter"] == {
        "outputParameterKey": "hyperparameters", "producerTask": "tune-hyperparameters"}
    assert executors["exec-tune-hyperparameters"]["pvcMount"][0]["mountPath"] == "/mnt/fmnist"
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    from fmnist_kfp import __version__

    assert len(images) == 1 and images.pop().endswith(f":{__version__}")  # one tagged image
    # The images of the pods the steps create: constants from the platform, not parameters.
    assert not {"image", "gpu_image"} & set(parameters)
    assert _task(spec, "train-model")["inputs"]["parameters"]["gpu_image"] == {
        "runtimeValue": {"constant": f"ghcr.io/fmnist-kfp/fmnist-kfp:{__version__}-gpu"}}
    # The release it belongs to (pipelineInfo.name stays the pipeline's identity).
    assert spec["pipelineInfo"]["displayName"] == f"fashion-mnist-training {__version__}"
    assert f"Release {__version__} of fmnist-kfp" in spec["pipelineInfo"]["description"]


@pytest.fixture(scope="module")
def data_parameters(tmp_path_factory) -> dict:
    """The real data (a subset of it for training) when $FASHION_MNIST_DIR is set — as in CI —
    else the synthetic fixture."""
    real = os.environ.get("FASHION_MNIST_DIR", "")
    if real:
        return {"data_source": real, "train_examples": 3000}
    if os.environ.get("CI") == "true":
        pytest.fail("CI must run the end-to-end pipeline on the real data: set FASHION_MNIST_DIR")
    from tests.fixtures import make_synthetic_idx_dir

    directory = tmp_path_factory.mktemp("e2e-idx")
    return {"data_source": str(directory), "expected_sha256": make_synthetic_idx_dir(directory),
            "train_examples": 1000, "validation_examples": 200}




@pytest.fixture
def clock(monkeypatch):
    """Pins the clock the freshness step reads (every kfp.local step inherits this process's
    environment), so a run never straddles a window edge by accident — e.g. at 00:00 UTC — and
    the test moves it on purpose. Returns the setter."""
    from fmnist_kfp.dataset.freshness import CLOCK_ENV

    def set_clock(seconds: float) -> None:
        monkeypatch.setenv(CLOCK_ENV, str(seconds))

    set_clock(NOON)
    return set_clock


@pytest.fixture
def serving_state(tmp_path, monkeypatch):
    """Local deployments of this test live in its own directory and are stopped after it."""
    from fmnist_kfp.serving.deploy.local_deployer import stop_server

    monkeypatch.setenv("FMNIST_SERVING_STATE_DIR", str(tmp_path / "serving"))
    yield
    stop_server(PipelineParameters().model_name)


@pytest.mark.slow
def test_local_pipeline_runs_end_to_end_then_from_cache(real_run, clock, tmp_path):
    """The shared real run (tests/pipelines/conftest.py), then again six hours later from the
    cache, then in the next freshness window."""
    parameters, first, summary_path = real_run.parameters, real_run.summary, real_run.summary_path
    assert json.loads(summary_path.read_text())["best_model_type"] == first["best_model_type"]
    assert set(first["models"]) == {"basic", "dropout", "batchnorm"}
    # Chosen on the validation split; only the chosen model has a test accuracy.
    best = max(first["models"].items(), key=lambda item: item[1]["validation_accuracy"])
    assert first["best_model_type"] == best[0]
    assert first["best_validation_accuracy"] == best[1]["validation_accuracy"]
    assert all("test_accuracy" not in m for m in first["models"].values())
    assert first["best_test_accuracy"] > 0.5  # one epoch on a few thousand images learns
    assert all(m["train_seconds"] > 0 for m in first["models"].values())
    steps = [s["step"] for s in first["steps"]]
    assert steps.count("train-model") == 3
    assert steps.count("tune-hyperparameters") == 3  # tuning off: the given values, at once
    assert not first["tuned"]
    assert first["models"]["basic"]["hyperparameters"] == {
        "learning_rate": PipelineParameters().learning_rate, "batch_size": 64, "filters": 32,
        "dropout_rate": 0.5}
    assert {"freshness-window", "ingest-fashion-mnist", "select-best-model"} <= set(steps)
    assert not first["cache_hits"] and all(s["seconds"] >= 0 for s in first["steps"])
    assert (Path(first["best_model_path"]) / "1" / "saved_model.pb").exists()
    report = Path(first["report_path"]).read_text()
    assert first["report_path"] == str(summary_path.parent / "report.html")
    assert first["report_markdown_path"] == str(summary_path.parent / "report.md")
    # The KFP artifact, in the copy before the table of where the time went.
    artifact = Path(first["report_artifact_path"]).read_text()
    head, timing = report.split("<h2>Where the time went</h2>")
    assert head + timing[timing.index("</table>") + len("</table>"):] == artifact
    assert "data:image/png;base64," in report and "Per-class accuracy" in report
    assert "Training and validation curves" in report
    assert "| model | validation accuracy | test accuracy |" in \
        Path(first["report_markdown_path"]).read_text()
    # The winner is served on loopback and scored over HTTP like the selection scored it.
    deployment = first["deployment"]
    assert deployment["action"] == "created" and deployment["blessing"]["blessed"]
    assert deployment["url"].startswith("http://127.0.0.1:")
    assert deployment["verification_ok"] is True
    assert 0.5 < deployment["served_accuracy"] <= 1.0
    import httpx

    from fmnist_kfp.serving.deploy.client import v1_image_request
    from tests.fixtures import synthetic_split

    images, _ = synthetic_split(3, seed=5)
    response = httpx.post(f"{deployment['url']}/v1/models/{parameters.model_name}:predict",
                          json=v1_image_request(images))
    assert response.status_code == 200 and len(response.json()["predictions"]) == 3

    # Six hours later, inside the same 24-hour window, every step but the never-cached ones
    # comes from cache.
    clock(NOON + 6 * 3600)
    again = {"pipeline_root": str(real_run.root), "summary_path": str(tmp_path / "summary.json")}
    second = run_local(parameters, **again)
    assert second["all_steps_cached"], second["steps"]
    assert second["deployment"]["action"] == "unchanged"
    assert second["deployment"]["url"] == deployment["url"]
    assert second["deployment"]["served_accuracy"] == deployment["served_accuracy"]
    assert set(second["cache_hits"]) == {"ingest-fashion-mnist", "tune-hyperparameters",
                                         "train-model", "select-best-model", "batch-predict"}
    assert second["best_model_path"] == first["best_model_path"]
    assert second["best_test_accuracy"] == first["best_test_accuracy"]

    # One minute into the next window, the ingest step's inputs the same (freshness still 24h;
    # one model type, which only the later steps take, to spare two trainings): its cache
    # entry has expired, so ingestion runs again, and what depends on its data with it.
    clock(NOON + 12 * 3600 + 60)
    third = run_local(replace(parameters, model_types=["basic"]), **again)
    assert parameters.freshness == "24h"
    assert "ingest-fashion-mnist" not in third["cache_hits"]
    assert "ingest-fashion-mnist" in [s["step"] for s in third["steps"]]
    assert "train-model" not in third["cache_hits"]
    assert third["deployment"]["action"] in ("unchanged", "promoted", "rejected")


@pytest.mark.slow
def test_tuned_pipeline_trains_with_the_searchs_best_values_then_from_cache(
        data_parameters, tmp_path, serving_state, clock):
    """tune=True: a real (small) search per model, whose best values train the final model;
    a re-run with the same inputs takes the search from the cache too."""
    tuning = {"algorithm": "random", "max_trials": 2, "parallel_trials": 2, "epochs": 1,
              "train_examples": 800, "early_stopping": False,
              "random_state": 3}
    parameters = PipelineParameters(
        epochs=1, batch_size=64, model_types=["basic"], prediction_images=100,
        verification_images=50, tune=True, tuning=tuning, **data_parameters)
    root = tmp_path / "runs"
    first = run_local(parameters, pipeline_root=str(root))
    assert first["tuned"] and "tune-hyperparameters" in [s["step"] for s in first["steps"]]
    results = list(root.rglob("search/result.json"))
    assert len(results) == 1
    search = json.loads(results[0].read_text())
    assert len(search["trials"]) == 2 and search["backend"] == "local"
    assert {t["status"] for t in search["trials"]} == {"Succeeded"}
    assert search["best_objective"] == max(t["objective"] for t in search["trials"])
    best = search["best_parameters"]
    assert set(best) == {"learning_rate", "batch_size", "filters"}
    trained = first["models"]["basic"]["hyperparameters"]
    assert {k: trained[k] for k in best} == best  # the final model trained with them
    [report] = [p for p in root.rglob("report") if "tune-hyperparameters" in str(p)]
    assert "data:image/png;base64," in report.read_text()  # objective against trial
    assert "Hyperparameter search" in report.read_text()
    assert first["tuning_reports"] == {"basic": str(root / "tuning-basic.html")}
    assert Path(first["tuning_reports"]["basic"]).read_text() == report.read_text()

    second = run_local(parameters, pipeline_root=str(root))
    assert second["all_steps_cached"], second["steps"]
    assert "tune-hyperparameters" in second["cache_hits"]
    assert second["models"]["basic"]["hyperparameters"] == trained


class _Artifact:
    """What run_local reads of a kfp.local output artifact."""

    def __init__(self, path: Path, metadata: dict | None = None):
        self.path = self.uri = str(path)
        self.metadata = metadata or {}


def test_the_run_names_reports_a_browser_renders(tmp_path, monkeypatch, capsys, synthetic_idx):
    """KFP writes HTML and Markdown output artifacts to paths without an extension (the
    Kubeflow UI renders them by type), which a browser shows as source: the summary and what
    `run --local` prints name copies ending in .html and .md, the search reports of a tuned
    run too. The pipeline itself is stubbed: this is about the summary, not the steps."""
    root = tmp_path / "runs"
    select, tune = root / "run-1" / "select-best-model", root / "run-1" / "tune-hyperparameters"
    select.mkdir(parents=True)
    tune.mkdir(parents=True)
    (select / "report").write_text("<html>selection</html>")
    (select / "report_markdown").write_text("| model | validation accuracy |")
    (tune / "report").write_text("<html>Hyperparameter search</html>")
    best = {"learning_rate": 0.002, "batch_size": 64, "filters": 32, "dropout_rate": 0.5}
    search = {"uri": str(tune / "search"), "metadata": {"lineage": {"parameters": {
        "model_type": "basic", "tuned": True, "best": best}}}}
    (tune / "executor_output.json").write_text(json.dumps(
        {"artifacts": {"search": {"artifacts": [search]}}}))
    leaderboard = [{"model_type": "basic", "validation_accuracy": 0.9, "train_seconds": 3.0,
                    "parameters": 1000, "epochs": 1, "hyperparameters": best}]
    outputs = SimpleNamespace(outputs={
        "best_model": _Artifact(root / "model", {"test_accuracy": 0.89,
                                                 "validation_accuracy": 0.9,
                                                 "leaderboard": leaderboard}),
        "best_model_type": "basic",
        "report": _Artifact(select / "report"),
        "report_markdown": _Artifact(select / "report_markdown"),
        "deployment": _Artifact(root / "deployment", {"action": "created",
                                                      "name": "fashion-mnist"}),
        "serving_url": "http://127.0.0.1:1", "served_accuracy": 0.89,
        "batch_predictions": _Artifact(root / "predictions", {"rows": 10, "errors": 0,
                                                              "images_per_second": 5.0}),
    })
    monkeypatch.setattr("kfp.local.init", lambda **kwargs: None)
    monkeypatch.setattr("fmnist_kfp.pipelines.fashion_mnist.make_pipeline",
                        lambda parallelism: lambda **arguments: outputs)
    directory, _ = synthetic_idx
    assert cli_main(["run", "--local", "--pipeline-root", str(root), "--data-source",
                     str(directory), "--model-types", "basic", "--tune"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((root / "summary.json").read_text())
    assert summary["report_path"] == str(root / "report.html")
    assert summary["report_markdown_path"] == str(root / "report.md")
    assert summary["tuning_reports"] == {"basic": str(root / "tuning-basic.html")}
    # The copies, each ending with where the time went (the steps kfp.local ran: none here).
    assert (root / "report.html").read_text().startswith(
        "<html>selection</html><h2>Where the time went</h2>")
    assert (root / "report.md").read_text().startswith(
        "| model | validation accuracy |\n## Where the time went\n")
    assert (root / "tuning-basic.html").read_text() == "<html>Hyperparameter search</html>"
    for path in ("report.html", "report.md", "tuning-basic.html"):
        assert str(root / path) in printed
    # The artifacts themselves are untouched, and the summary still names them.
    assert (select / "report").read_text() == "<html>selection</html>"
    assert summary["report_artifact_path"] == str(select / "report")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model-types", "basic,vgg"], "unknown model type 'vgg'"),
        (["--epochs", "0"], "epochs must be a positive integer"),
        (["--batch-size", "-1"], "batch_size must be a positive integer"),
        (["--freshness", "soon"], "freshness 'soon' is not a positive duration"),
        (["--num-workers", "0"], "num_workers must be at least 1"),
        (["--blessing-tolerance", "2"], "blessing tolerance 2.0 is not an accuracy difference"),
        (["--serving", '{"replicas": 3}'], "unknown serving settings ['replicas']"),
        (["--serving", "[1]"], "--serving must be a JSON object"),
        (["--tune", "--tuning", '{"algorithm": "annealing"}'], "unknown algorithm 'annealing'"),
        (["--tune", "--tuning", '{"max_trials": 2, "parallel_trials": 3}'],
         "max_trial_count (2) is below parallel_trial_count (3)"),
        (["--tune", "--tuning", '{"validation_examples": 500}'],
         "unknown tuning settings ['validation_examples']"),
        (["--validation-examples", "0"], "validation_examples must be a positive integer"),
    ],
)
def test_bad_parameters_fail_before_any_work(arguments, message, tmp_path, capsys,
                                             synthetic_idx):
    directory, _ = synthetic_idx
    root = tmp_path / "runs"
    code = cli_main(["run", "--local", "--pipeline-root", str(root),
                     "--data-source", str(directory), *arguments])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not root.exists()


def test_data_directory_missing_a_file_fails_before_any_work(tmp_path, capsys, synthetic_idx):
    directory, _ = synthetic_idx
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (partial / name).write_bytes((directory / name).read_bytes())
    code = cli_main(["run", "--local", "--pipeline-root", str(tmp_path / "runs"),
                     "--data-source", str(partial)])
    assert code == 2
    assert "lacks t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz" in capsys.readouterr().err


@pytest.mark.slow
def test_serve_early_with_parameter_servers_serves_the_first_model_then_the_selected_one(
        data_parameters, tmp_path, serving_state, clock):
    """serve_early=True through kfp.local (issue 23): the first model to finish training is
    served before the next one trains; each later one replaces it only when better on
    validation; the run ends serving the model selection chose, and the summary says when
    each model started serving. The models train with strategy=parameter_server (a chief, 2
    workers, a PS and an evaluator on loopback), selected and served like any other, the report
    showing the evaluator's per-epoch validation accuracy. (One run for both: each local run
    costs a minute of CI before its first model trains.)"""
    parameters = PipelineParameters(epochs=1, num_workers=2, batch_size=64,
                                    model_types=["basic", "batchnorm"], serve_early=True,
                                    strategy="parameter_server", num_ps=1, evaluator=True,
                                    prediction_images=100, **data_parameters)
    summary = run_local(parameters, pipeline_root=str(tmp_path / "runs"))
    assert summary["best_test_accuracy"] > 0.5
    history = summary["serving_history"]
    assert history[0]["how"] == "serve_early" and history[0]["model_type"] == "basic"
    assert history[0]["action"] == "created"
    steps = summary["steps"]
    second_train = [s for s in steps if s["step"] == "train-model"][1]
    first_served = summary["first_served_seconds"]
    # Served before the second model had finished training, long before selection.
    assert 0 < first_served < second_train["ended_seconds"]
    early = [h for h in history if h["how"] == "serve_early"]
    assert all(b["validation_accuracy"] > a["validation_accuracy"]
               for a, b in zip(early, early[1:], strict=False))
    deployment = summary["deployment"]
    assert deployment["verification_ok"] is True
    from fmnist_kfp.serving.deploy.local_deployer import model_fingerprint, running_server

    served = running_server(parameters.model_name)
    assert served.model_fingerprint == model_fingerprint(summary["best_model_path"])
    assert served.test_accuracy == summary["best_test_accuracy"]
    report = Path(summary["report_markdown_path"]).read_text()
    assert "## When each model started serving" in report
    assert f"| {history[0]['seconds_into_run']:.1f} | basic | served early |" in report
    assert "When each model started serving" in Path(summary["report_path"]).read_text()
    # The evaluator's accuracy, one row per epoch, a column per model (synthetic data can
    # reach 1.0000).
    assert "## Validation accuracy per epoch (evaluator)" in report
    section = report.split("## Validation accuracy per epoch (evaluator)")[1].split("\n## ")[0]
    assert "| epoch | basic | batchnorm |" in section, section
    rows = re.findall(r"^\| (\d+) \| ([01]\.\d{4}) \| ([01]\.\d{4}) \|$", section, re.M)
    assert [row[0] for row in rows] == ["1"], section
    result = json.loads((Path(summary["best_model_path"]) / "result.json").read_text())
    assert result["strategy"] == "parameter_server"
    assert [e["epoch"] for e in result["evaluation"]] == [1]
