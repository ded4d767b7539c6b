"""The compiled components, as a user composes them: from ``compiled/components/*.yaml`` alone.

A user loads them with ``kfp.components.load_component_from_file``, wires them in a pipeline of
their own, adds the kfp-kubernetes calls each component's README names, and compiles it — or
runs it with ``kfp.local``. Both happen here in a child process that never imports this
package's component objects (the child checks that none of ``fmnist``, ``kfp_components`` or
``pipelines`` was imported by the pipeline it built; the kfp.local steps import the package, as
the image's steps do).

Until 0.2.0 this failed at compile time: each compiled component carried its image as container
``env``, which KFP 2.17 loads back as a list (``kfp/dsl/structures.py``
``ContainerSpecImplementation.from_container_dict``) and its compiler then calls ``.items()``
on (``kfp/compiler/pipeline_spec_builder.py`` ``build_container_spec_for_task``).

How the defaults reach a step: KFP's launcher puts each input's ``defaultValue`` into the
executor input when the task passes none (kubeflow/pipelines 2.5.0 and 2.17.0
``backend/src/v2/component/launcher_v2.go`` ``addDefaultParams``), as kfp.local does
(``kfp/local/executor_input_utils.py``); the test below runs that path under kfp.local.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fmnist_kfp.kfp_components.registry import COMPONENTS
from fmnist_kfp.settings.pipeline import cluster_defaults
from fmnist_kfp.settings.platform import JobImages
from tests import ROOT

COMPILED = ROOT / "compiled" / "components"
# The inputs with no sensible default: the artifacts a step works on, and the served URL.
REQUIRED = {"url"}
# The steps that create pods, and their image inputs.
JOB_IMAGE_INPUTS = {"train-model": {"image", "gpu_image"},
                    "tune-hyperparameters": {"image", "gpu_image"},
                    "batch-predict": {"image"}, "deploy-model": {"image"},
                    "promote-early": {"image"}}


def _component(path: Path) -> dict:
    spec = next(yaml.safe_load_all(path.read_text()))
    [component] = spec["components"].values()
    [executor] = spec["deploymentSpec"]["executors"].values()
    return {"component": component, "container": executor["container"]}


def _readme_calls(folder: Path) -> str:
    """The code of the README's "On Kubernetes" section."""
    text = (folder / "README.md").read_text()
    section = text.split("## On Kubernetes", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL)[1]


def test_every_compiled_component_is_composable_as_compiled():
    """No container env; every input and output described (the Kubeflow UI shows these);
    every parameter defaulted to the Kubeflow variant's value, the job images to the
    compiled ones; only artifacts and the served URL required."""
    defaults = {**cluster_defaults().arguments(),
                **{k: v for k, v in vars(JobImages.chosen()).items()}}
    files = sorted(COMPILED.glob("*.yaml"))
    assert len(files) == len(COMPONENTS)
    for path in files:
        found = _component(path)
        name, component = path.stem, found["component"]
        assert "env" not in found["container"], name
        inputs = component["inputDefinitions"]
        for kind in ("parameters", "artifacts"):
            for key, value in inputs.get(kind, {}).items():
                assert value.get("description"), (name, key)
        for kind in ("parameters", "artifacts"):
            for key, value in component.get("outputDefinitions", {}).get(kind, {}).items():
                assert value.get("description"), (name, "output", key)
        parameters = inputs.get("parameters", {})
        required = {k for k, v in parameters.items() if "defaultValue" not in v}
        assert required <= REQUIRED, (name, required)
        for key, value in parameters.items():
            if key in defaults and "defaultValue" in value:
                assert value["defaultValue"] == defaults[key], (name, key)
        images = {k for k in parameters if k in ("image", "gpu_image")}
        assert images == JOB_IMAGE_INPUTS.get(name, set()), name
    backend = _component(COMPILED / "train-model.yaml")["component"]["inputDefinitions"]
    assert backend["parameters"]["backend"]["defaultValue"] == "kubernetes"
    assert backend["parameters"]["num_workers"]["defaultValue"] == 2


def test_the_readmes_name_the_kubernetes_calls_the_pipeline_makes():
    """What each README tells a user to call is what the compiled pipeline does to the same
    step: the claim mounted at /mnt/fmnist and named in FMNIST_PVC_NAME where the step (and its
    pods) use it; object-store keys from a Secret where it reads data."""
    spec, platform = yaml.safe_load_all((ROOT / "compiled" / "fashion_mnist_pipeline.yaml")
                                        .read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    containers = spec["deploymentSpec"]["executors"]
    for folder in sorted(p.parent for p in (ROOT / "kfp_components").glob("*/README.md")):
        calls = _readme_calls(folder)
        name = re.search(r'"compiled/components/([\w-]+)\.yaml"',
                         (folder / "README.md").read_text())[1]
        executor = f"exec-{name}"
        mounts = executors.get(executor, {}).get("pvcMount", [])
        assert ("kubernetes.mount_pvc(task" in calls) == bool(mounts), name
        env = {e["name"] for e in containers[executor]["container"].get("env", [])}
        if mounts:
            assert mounts[0]["mountPath"] == "/mnt/fmnist" and "/mnt/fmnist" in calls
            assert 'task.set_env_variable("FMNIST_PVC_NAME", "fmnist-data")' in calls
            assert "FMNIST_PVC_NAME" in env
        assert ("use_secret_as_env" in calls) == (name in {
            "ingest-fashion-mnist", "train-model", "tune-hyperparameters", "batch-predict"}), name


# A user's pipeline over the compiled components, with the README's calls for each task.
USER_PIPELINE = '''
import json, sys
from kfp import compiler, components, dsl, kubernetes

def load(name):
    return components.load_component_from_file(f"{COMPILED}/{name}.yaml")

def on_kubernetes(task, folder):
    exec(CALLS[folder], {"task": task})
    return task

freshness_window, ingest, tune, train, select, batch_predict, deploy, predict = map(load, [
    "freshness-window", "ingest-fashion-mnist", "tune-hyperparameters", "train-model",
    "select-best-model", "batch-predict", "deploy-model", "predict-with-served-model"])

@dsl.pipeline(name="my-fashion-mnist")
def my_pipeline(epochs: int = 3):
    window = on_kubernetes(freshness_window(), "freshness")
    data = on_kubernetes(ingest(freshness_window=window.output), "ingest")
    with dsl.ParallelFor(items=["basic", "batchnorm"]) as model_type:
        search = on_kubernetes(tune(dataset=data.outputs["dataset"], model_type=model_type,
                                    enabled=False), "tune")
        trained = on_kubernetes(train(dataset=data.outputs["dataset"], model_type=model_type,
                                      hyperparameters=search.outputs["hyperparameters"],
                                      epochs=epochs), "train")
    best = on_kubernetes(select(dataset=data.outputs["dataset"],
                                candidates=dsl.Collected(trained.outputs["model"])), "select")
    on_kubernetes(batch_predict(model=best.outputs["best_model"],
                                dataset=data.outputs["dataset"]), "batch_predict")
    served = on_kubernetes(deploy(model=best.outputs["best_model"],
                                  dataset=data.outputs["dataset"]), "deploy")
    on_kubernetes(predict(model=best.outputs["best_model"], dataset=data.outputs["dataset"],
                          url=served.outputs["url"],
                          serves_model=served.outputs["serves_model"]), "predict")

compiler.Compiler().compile(my_pipeline, OUT)
ours = sorted(m for m in sys.modules if m.split(".")[0] in (
    "fmnist", "fmnist_kfp", "kfp_components", "pipelines"))
print(json.dumps(ours))
'''


def test_a_users_pipeline_of_the_compiled_components_compiles(tmp_path):
    calls = {folder.name: _readme_calls(folder)
             for folder in (ROOT / "kfp_components").iterdir() if (folder / "README.md").exists()}
    out = tmp_path / "my_pipeline.yaml"
    script = (f"COMPILED = {str(COMPILED)!r}\nOUT = {str(out)!r}\nCALLS = {calls!r}\n"
              + USER_PIPELINE)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []  # the YAML alone
    spec, platform = yaml.safe_load_all(out.read_text())
    executors = spec["deploymentSpec"]["executors"]
    kubernetes = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    images = JobImages.chosen()
    assert {e["container"]["image"] for e in executors.values()} == {images.image}
    for name in ("train-model", "tune-hyperparameters", "batch-predict"):
        assert kubernetes[f"exec-{name}"]["pvcMount"] == [
            {"constant": "fmnist-data", "mountPath": "/mnt/fmnist",
             "pvcNameParameter": {"runtimeValue": {"constant": "fmnist-data"}}}]
        env = {e["name"]: e["value"] for e in executors[f"exec-{name}"]["container"]["env"]}
        assert env["FMNIST_PVC_NAME"] == "fmnist-data"
    # The user passed no images: the steps get the components' defaults, the compiled images.
    train = spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]
    assert train["image"]["defaultValue"] == images.image
    assert train["gpu_image"]["defaultValue"] == images.gpu_image
    assert train["backend"]["defaultValue"] == "kubernetes"


LOCAL_RUN = '''
import json, sys
from kfp import components, dsl, local

def load(name):
    return components.load_component_from_file(f"{COMPILED}/{name}.yaml")

freshness_window, ingest, train, select = map(load, [
    "freshness-window", "ingest-fashion-mnist", "train-model", "select-best-model"])

@dsl.pipeline(name="tiny-fashion-mnist")
def tiny(data_source: str) -> str:
    window = freshness_window(freshness="1h")
    data = ingest(data_source=data_source, freshness_window=window.output)
    with dsl.ParallelFor(items=["basic"], parallelism=1) as model_type:
        trained = train(dataset=data.outputs["dataset"], model_type=model_type, epochs=1,
                        train_examples=3000, hyperparameters={"batch_size": 64, "filters": 16},
                        num_workers=1, backend="local")
    return select(dataset=data.outputs["dataset"],
                  candidates=dsl.Collected(trained.outputs["model"])).outputs["Output"]

local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=ROOT_DIR,
           raise_on_error=True)
task = tiny(data_source=DATA)
ours = sorted(m for m in sys.modules if m.split(".")[0] in (
    "fmnist", "fmnist_kfp", "kfp_components", "pipelines"))
print(json.dumps({"best": task.output, "ours": ours}))
'''


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_compiled_components_run_under_kfp_local_on_the_real_data(real_data_dir, tmp_path):
    """freshness → ingest (the real Fashion-MNIST) → train (a small basic CNN, one epoch on
    3,000 examples, backend local) → select, from the YAML alone, every other input at its
    compiled default; the outputs are real: a SavedModel chosen on the validation split and
    scored once on the test split."""
    root = tmp_path / "runs"
    script = (f"COMPILED = {str(COMPILED)!r}\nROOT_DIR = {str(root)!r}\n"
              f"DATA = {str(real_data_dir)!r}\n" + LOCAL_RUN)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=580, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"best": "basic", "ours": []}
    [dataset] = root.rglob("ingest-fashion-mnist/dataset")
    metadata = json.loads((dataset / "metadata.json").read_text())
    assert metadata["splits"]["validation"]["num_examples"] == 5000  # the default
    assert metadata["splits"]["train"]["num_examples"] == 55000
    [model] = root.rglob("select-best-model/best_model")
    assert (model / "1" / "saved_model.pb").exists()
    result = json.loads((model / "result.json").read_text())
    assert result["model_type"] == "basic" and result["epochs"] == 1
    assert result["hyperparameters"]["batch_size"] == 64  # given; the rest their defaults
    assert result["hyperparameters"]["learning_rate"] == 0.004
    [metrics] = root.rglob("select-best-model/metrics")
    values = json.loads(metrics.read_text())
    assert values["best_validation_accuracy"] == values["basic_validation_accuracy"]
    # One epoch on 3,000 images learns (chance is 0.1); the test split is read for the winner.
    assert 0.5 < values["best_validation_accuracy"] <= 1.0, values
    assert 0.5 < values["best_test_accuracy"] <= 1.0, values


def test_the_example_of_one_component_in_a_users_pipeline_compiles(tmp_path):
    """docs/python-api.md's example "One component in your pipeline", as written, over the
    files ``fmnist-kfp compile --output-dir .`` writes into ``components/``, in a child that
    imports none of this package: it compiles, and the train task mounts the claim and names
    it."""
    page = (ROOT / "docs" / "python-api.md").read_text()
    section = page.split("\n## One component in your pipeline\n", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (tmp_path / "components").mkdir()
    for path in COMPILED.glob("*.yaml"):
        (tmp_path / "components" / path.name).write_text(path.read_text())
    script = example + textwrap.dedent("""
        import sys
        from kfp import compiler
        compiler.Compiler().compile(my_training, "my_training.yaml")
        assert "fmnist_kfp" not in {name.split(".")[0] for name in sys.modules}
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr[-3000:]
    documents = list(yaml.safe_load_all((tmp_path / "my_training.yaml").read_text()))
    platform = documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    [train] = [spec for name, spec in platform.items() if "train" in name]
    assert train["pvcMount"][0]["mountPath"] == "/mnt/fmnist"
    executors = documents[0]["deploymentSpec"]["executors"]
    [train_executor] = [e for name, e in executors.items() if "train" in name]
    assert {"name": "FMNIST_PVC_NAME", "value": "fmnist-data"} in \
        train_executor["container"]["env"]
