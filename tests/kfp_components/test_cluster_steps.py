"""The kubernetes paths of the steps, as a KFP pod runs them.

The pipeline is compiled with ``FMNIST_COMPONENT_IMAGE=registry.example/team/fmnist-kfp:9.9.9``
and ``FMNIST_GPU_IMAGE=registry.example/team/fmnist-kfp:9.9.9-cuda`` (a team's own registry;
the real cluster's node runs a repository named ``fmnist-kfp`` as the project's image); each
step's code then runs with only the environment the compiled YAML sets for its executor
(``deploymentSpec.executors.<exec>.container.env``: kubeflow/pipelines 2.15.0
backend/src/v2/driver/driver.go lines 250-254 copy it into the pod) and the
``image``/``gpu_image`` inputs its task passes (constants in ``root.dag``): the pods and jobs
each step creates run the compiled images, and what a step cannot do is refused before it
creates anything. The whole pipeline, every step a pod and every job the real operators'
(Katib, the Training Operator, Trainer, KServe): tests/pipelines/test_pipeline_on_the_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.preflight.katib import INJECTION_LABEL
from fmnist_kfp.settings.training import TrainingConfig
from tests import ROOT

REPO = ROOT
IMAGE = "registry.example/team/fmnist-kfp:9.9.9"
GPU_IMAGE = "registry.example/team/fmnist-kfp:9.9.9-cuda"
STEP_SECONDS = 600  # the most one step here may take (2 shared cores), under pytest's 900


def _tasks(spec: dict) -> dict[str, dict]:
    """Every task of the compiled pipeline (root, loops), by name."""
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    return {name: task for dag in dags for name, task in dag["tasks"].items()}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    """The pipeline compiled against IMAGE and GPU_IMAGE: each executor's image and
    environment, and the constant inputs its task passes."""
    out = tmp_path_factory.mktemp("compiled") / "pipeline.yaml"
    script = ("from kfp import compiler\n"
              "from fmnist_kfp.pipelines.fashion_mnist import fashion_mnist_pipeline\n"
              f"compiler.Compiler().compile(fashion_mnist_pipeline, {str(out)!r})\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "FMNIST_COMPONENT_IMAGE": IMAGE,
           "FMNIST_GPU_IMAGE": GPU_IMAGE}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, check=True,
                   timeout=600)
    spec = next(yaml.safe_load_all(out.read_text()))
    constants = {}
    for task in _tasks(spec).values():
        executor = spec["components"][task["componentRef"]["name"]].get("executorLabel")
        if executor:
            constants[executor] = {
                name: value["runtimeValue"]["constant"]
                for name, value in task.get("inputs", {}).get("parameters", {}).items()
                if "runtimeValue" in value}
    return {name: {"image": executor["container"]["image"],
                   "env": {e["name"]: e["value"] for e in executor["container"].get("env", [])},
                   "constants": constants[name]}
            for name, executor in spec["deploymentSpec"]["executors"].items()}


def _run_step(compiled: dict, executor: str, script: str, tmp_path: Path) -> dict:
    """Runs ``script`` with the executor's environment (and the interpreter's path); its last
    output line is JSON."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **compiled[executor]["env"]}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=STEP_SECONDS)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _images(job: dict) -> set[str]:
    """The images a TFJob's replicas or a TrainJob's nodes run."""
    if job["kind"] == "TrainJob":
        return {job["spec"]["trainer"]["image"]}
    return {c["image"] for replica in job["spec"]["tfReplicaSpecs"].values()
            for c in replica["template"]["spec"]["containers"]}


# The steps that create pods, and the image inputs each one's task passes.
JOB_IMAGES = {"exec-train-model": {"image": IMAGE, "gpu_image": GPU_IMAGE},
              "exec-tune-hyperparameters": {"image": IMAGE, "gpu_image": GPU_IMAGE},
              "exec-batch-predict": {"image": IMAGE},
              "exec-deploy-model": {"image": IMAGE},
              "exec-promote-early": {"image": IMAGE}}


@pytest.mark.slow
def test_every_step_and_everything_it_creates_runs_the_compiled_image(compiled, tmp_path):
    """Every step's own image is the component image; the steps that create pods get the
    compiled images as constant inputs (never run parameters), which the pods they create run:
    TFJob replicas with GPUs the GPU image and the rest the CPU image, trials alike, the batch
    Job and the ServingRuntime the CPU image. FMNIST_COMPONENT_IMAGE in a task's environment
    only records the task's own image, for lineage."""
    assert {e["image"] for e in compiled.values()} == {IMAGE}  # every step's own image
    for name, executor in compiled.items():
        assert executor["env"]["FMNIST_COMPONENT_IMAGE"] == executor["image"]
        images = {k: v for k, v in executor["constants"].items() if k in ("image", "gpu_image")}
        assert images == JOB_IMAGES.get(name, {}), name
    train, tune = (compiled[e]["constants"] for e in ("exec-train-model",
                                                        "exec-tune-hyperparameters"))
    found = _run_step(compiled, "exec-train-model", f"""
        import json
        from dataclasses import replace
        from fmnist_kfp.kubernetes.tfjob import build_tfjob
        from fmnist_kfp.kubernetes.manifest import to_manifest
        from fmnist_kfp.settings.jobs import cluster_settings
        from fmnist_kfp.settings.training import TrainingConfig
        from fmnist_kfp.training.training_job import TrainingJobSpec
        from fmnist_kfp.kubernetes.experiment import build_experiment
        from fmnist_kfp.kubernetes.manifest import to_manifest as experiment_manifest
        from fmnist_kfp.kfp_components.tune.step import experiment_settings

        def images(manifest):
            return {{kind: r["template"]["spec"]["containers"][0]["image"]
                     for kind, r in manifest["spec"]["tfReplicaSpecs"].items()}}

        pods = cluster_settings({{"namespace": "team-a"}}, image={train["image"]!r},
                                gpu_image={train["gpu_image"]!r})
        found = {{}}
        for strategy, gpus in (("multi_worker_mirrored", 0), ("multi_worker_mirrored", 1),
                               ("parameter_server", 1)):
            spec = TrainingJobSpec(name="fmnist-basic-x", config=TrainingConfig(),
                                   data_dir="/d", export_dir="/e/1", work_dir="/e",
                                   num_workers=2, use_chief=strategy != "parameter_server",
                                   strategy=strategy, evaluator=True, gpus_per_worker=gpus,
                                   num_ps=1 if strategy == "parameter_server" else 0)
            found[f"tfjob {{strategy}} {{gpus}}"] = images(to_manifest(build_tfjob(spec, pods)))
        trial_pods = cluster_settings({{"namespace": "team-a"}}, image={tune["image"]!r},
                                      gpu_image={tune["gpu_image"]!r})
        for gpus in (0, 1):
            settings, space = experiment_settings("fmnist-tune-basic", "basic",
                                                  TrainingConfig(), {{}}, num_workers=2,
                                                  gpus_per_worker=gpus)
            settings = replace(settings, kubernetes=trial_pods)
            experiment = experiment_manifest(build_experiment(settings, space, "/mnt/fmnist/d"))
            found[f"trial {{gpus}}"] = images(experiment["spec"]["trialTemplate"]["trialSpec"])
        print(json.dumps(found))
    """, tmp_path)
    assert found == {
        "tfjob multi_worker_mirrored 0": {"Chief": IMAGE, "Worker": IMAGE, "Evaluator": IMAGE},
        "tfjob multi_worker_mirrored 1": {"Chief": GPU_IMAGE, "Worker": GPU_IMAGE,
                                          "Evaluator": IMAGE},
        "tfjob parameter_server 1": {"Chief": IMAGE, "Worker": GPU_IMAGE, "PS": IMAGE,
                                     "Evaluator": IMAGE},
        "trial 0": {"Worker": IMAGE}, "trial 1": {"Worker": GPU_IMAGE}}


@pytest.mark.slow
def test_the_batch_job_and_the_serving_runtime_run_the_compiled_image(compiled, tmp_path):
    batch = compiled["exec-batch-predict"]["constants"]["image"]
    found = _run_step(compiled, "exec-batch-predict", f"""
        import json
        from fmnist_kfp.kubernetes.job import build_indexed_job
        from fmnist_kfp.kubernetes.manifest import to_manifest
        from fmnist_kfp.scoring.scoring_job import ScoringJobSpec
        from fmnist_kfp.kfp_components.batch_predict.step import scoring_backend

        scorer = scoring_backend("kubernetes", {{"namespace": "team-a"}}, {batch!r})
        spec = ScoringJobSpec(name="fmnist-batch-x", model_dir="/m", data_dir="/d",
                              output_dir="/o", source="", num_shards=2)
        job = to_manifest(build_indexed_job(spec, scorer.settings))
        print(json.dumps([c["image"] for c in job["spec"]["template"]["spec"]["containers"]]))
    """, tmp_path)
    assert found == [IMAGE]
    deploy = compiled["exec-deploy-model"]["constants"]["image"]
    found = _run_step(compiled, "exec-deploy-model", f"""
        import json
        from fmnist_kfp.settings.serving import ServingSettings
        from fmnist_kfp.kfp_components.deploy.step import kserve_settings
        from fmnist_kfp.kubernetes.serving_runtime import build_serving_runtime
        settings = kserve_settings("fashion-mnist", ServingSettings(namespace="team-a"),
                                   "pvc://fmnist-data/m", {deploy!r})
        runtime = build_serving_runtime(settings)
        print(json.dumps([c.image for c in runtime.spec.containers]))
    """, tmp_path)
    assert found == [IMAGE]


# The kubernetes parameter the chained test's steps get (with namespace and operator added).
_KUBERNETES = {"cpu": "500m", "memory": "2Gi"}  # two replicas fit the 2-CPU node


# Katib's pod mutator acts in namespaces with this label, as Kubeflow's profile controller sets
# it on every profile namespace (kubeflow/katib v0.19.0 manifests/v1beta1/components/webhook/
# webhooks.yaml 59-61).
KATIB_INJECTION_LABEL = {INJECTION_LABEL: "enabled"}


def katib_step_namespace(cluster, prefix: str, compiled: dict) -> str:
    """A step namespace (tests/cluster.py) for the tune step, labelled for Katib's metrics
    collector as a Kubeflow profile's namespace is."""
    from kubernetes import client

    name = cluster.step_namespace(
        prefix, claim=compiled["exec-tune-hyperparameters"]["env"]["FMNIST_PVC_NAME"])
    client.CoreV1Api(cluster.api_client).patch_namespace(
        name, {"metadata": {"labels": KATIB_INJECTION_LABEL}})
    return name


def katib_objects(cluster, namespace: str, plural: str) -> list[dict]:
    """Katib's ``plural`` (experiments, trials) in ``namespace``."""
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api_client).list_namespaced_custom_object(
        "kubeflow.org", "v1beta1", namespace, plural)["items"]


def _core_api(cluster):
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client)


def _run_step_pod(cluster, namespace: str, compiled: dict, executor: str,
                  script: str) -> tuple[dict, str]:
    """Runs ``script`` as KFP runs the executor's step (RealCluster.run_step_pod), with the
    compiled image and environment."""
    step = compiled[executor]
    return cluster.run_step_pod(namespace, executor.removeprefix("exec-"), step["image"],
                                step["env"], textwrap.dedent(script), STEP_SECONDS)


def training_job(cluster, namespace: str, kind: str) -> tuple[dict, list, list]:
    """The one job of ``kind`` (TFJob or TrainJob) in ``namespace``, its pods, and the jobs of
    the other kind there."""
    from kubernetes import client

    paths = {"TFJob": ("kubeflow.org", "v1", "tfjobs", "training.kubeflow.org/job-name"),
             "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs",
                          "jobset.sigs.k8s.io/jobset-name")}
    custom = client.CustomObjectsApi(cluster.api_client)
    found = {k: custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
             for k, (group, version, plural, _) in paths.items()}
    [job] = found.pop(kind)
    [others] = found.values()
    pods = _core_api(cluster).list_namespaced_pod(
        namespace, label_selector=f"{paths[kind][3]}={job['metadata']['name']}").items
    return job, pods, others


def collected_objective(experiment: dict, trial: dict, volume: Path) -> float:
    """The trial's ``val_accuracy`` as Katib's collector recorded it, checked to be the last
    epoch's in the trial's history on the claim (``latest``: the lines carry their times)."""
    history = [json.loads(line) for line in
               (volume / "katib" / experiment["metadata"]["name"] / trial["metadata"]["name"] /
                "history.jsonl").read_text().splitlines()]
    [objective] = [m for m in trial["status"]["observation"]["metrics"]
                   if m["name"] == "val_accuracy"]
    assert objective["latest"] == f"{history[-1]['val_accuracy']:.4f}"
    return float(objective["latest"])


def test_the_trial_tfjobs_get_the_runs_workers_and_gpus(synthetic_dataset, tmp_path,
                                                        monkeypatch):
    """The tune step takes num_workers and gpus_per_worker: every trial's TFJob has them."""
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    from fmnist_kfp.kfp_components.tune.step import tune_step
    from tests.katib.test_katib_launcher import BEST, _launcher
    from tests.standins.katib import KatibStandIn, state

    with KatibStandIn([state("Succeeded", succeeded=1, best=BEST)], [BEST]) as standin:
        tune_step(model_type="dropout", base=TrainingConfig(model_type="dropout"),
                  tuning={"algorithm": "random", "max_trials": 4, "early_stopping": False},
                  data_dir=str(synthetic_dataset), output_dir=str(tmp_path / "search"),
                  backend="kubernetes", num_workers=3, gpus_per_worker=1,
                  kubernetes={"namespace": "team-a", "pvc_name": "fmnist-pvc",
                              "mount_path": str(tmp_path / "volume")},
                  image=IMAGE, gpu_image=GPU_IMAGE, launcher=_launcher(standin))
    [posted] = standin.posts()
    replicas = posted["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]
    assert set(replicas) == {"Worker"} and replicas["Worker"]["replicas"] == 3
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"] == GPU_IMAGE


# ---------------------------------------------------------------------------------------------
# The user's kubernetes settings, merged over the compiled platform in one place


@pytest.fixture
def on_the_cluster(monkeypatch, tmp_path):
    """A step pod's situation: the compiled claim in the environment, mounted at ``volume``,
    and the namespace it runs in (team-a)."""
    import fmnist_kfp.settings.jobs as jobs
    import fmnist_kfp.settings.platform as platform

    volume = tmp_path / "volume"
    volume.mkdir()
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("team-a")
    monkeypatch.setenv("FMNIST_PVC_NAME", "fmnist-data")
    monkeypatch.setattr(platform, "MOUNT_PATH", str(volume))
    monkeypatch.setattr(jobs, "SERVICE_ACCOUNT_NAMESPACE", str(namespace_file))
    return volume


class _Recorded(Exception):
    pass


class TFJobsServed:
    """A cluster's API discovery where the Training Operator v1 serves TFJobs."""

    def serves(self, group_version, plural):
        return (group_version, plural) == ("kubeflow.org/v1", "tfjobs")

    def runtime_exists(self, name):
        return False

    def trainjob_fields(self):
        return None


def test_user_settings_are_merged_over_the_compiled_claim(on_the_cluster, synthetic_dataset,
                                                          tmp_path):
    """At 1cd2394 the pipeline's kubernetes parameter replaced the compiled {"pvc_name": ...}:
    --kubernetes '{"namespace": ..., "cpu": ...}' made a TFJob without a volume."""
    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.kubernetes.manifest import to_manifest
    from fmnist_kfp.kubernetes.tfjob import build_tfjob

    made = {}

    def make_launcher(settings, operator, shape):
        assert (operator, shape) == ("tfjob", "")

        class Launcher:
            def run(self, job):  # the ClusterJob the step checked
                made["tfjob"] = to_manifest(build_tfjob(job.spec, settings))
                raise _Recorded()
        return Launcher()

    with pytest.raises(_Recorded):
        train_step(config=TrainingConfig(model_type="basic"), data_dir=str(synthetic_dataset),
                   model_dir=str(tmp_path / "model"), backend="kubernetes",
                   launcher_options={"namespace": "team-a", "cpu": "4"}, image=IMAGE,
                   make_launcher=make_launcher, discovery=TFJobsServed())
    pod = made["tfjob"]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "fmnist-data"
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == str(on_the_cluster)
    assert pod["containers"][0]["resources"]["limits"]["cpu"] == "4"
    assert pod["containers"][0]["image"] == IMAGE
    command = pod["containers"][0]["command"]
    assert command[command.index("--data-dir") + 1].startswith(f"{on_the_cluster}/datasets/")


@pytest.fixture
def no_cluster_calls(monkeypatch):
    """Every way a step reaches the cluster (the clients' configuration loaders) fails the
    test: what is refused must be refused before the first call."""
    from kubernetes import config

    def called(*args, **kwargs):
        raise AssertionError("the step called the cluster")

    for loader in ("load_kube_config", "load_incluster_config", "new_client_from_config"):
        monkeypatch.setattr(config, loader, called)


@pytest.mark.parametrize(("kubernetes", "problem"), [
    ({"namespace": "team-b"}, "puts the TFJobs in namespace 'team-b', but this step runs in "
                              "'team-a'"),
    ({"pvc_name": "other-claim"}, "this step mounts the claim 'fmnist-data'"),
    ({"mount_path": "/data"}, "this step mounts the claim 'fmnist-data'"),
])
def test_pods_that_could_not_share_the_claim_are_refused_before_anything(
        on_the_cluster, no_cluster_calls, synthetic_dataset, tmp_path, kubernetes, problem):
    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.kfp_components.tune.step import tune_step

    with pytest.raises(UserInputError, match=problem.replace("'", ".")):
        train_step(config=TrainingConfig(model_type="basic"),
                   data_dir=str(synthetic_dataset), model_dir=str(tmp_path / "model"),
                   backend="kubernetes", launcher_options=kubernetes, image=IMAGE)
    with pytest.raises(UserInputError, match=problem.replace("'", ".")):
        tune_step(model_type="basic", base=TrainingConfig(model_type="basic"),
                  tuning={"algorithm": "random"}, data_dir=str(synthetic_dataset),
                  output_dir=str(tmp_path / "search"), backend="kubernetes",
                  kubernetes=kubernetes, image=IMAGE)
    assert list(on_the_cluster.iterdir()) == []  # nothing staged


def test_a_tfjob_needs_a_shared_claim(monkeypatch, synthetic_dataset, tmp_path):
    from fmnist_kfp.kfp_components.train.step import train_step

    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    with pytest.raises(UserInputError, match="needs the shared claim.*FMNIST_PVC_NAME"):
        train_step(config=TrainingConfig(model_type="basic"), data_dir=str(synthetic_dataset),
                   model_dir=str(tmp_path / "model"), backend="kubernetes",
                   launcher_options={"namespace": "team-a"}, image=IMAGE)


def test_a_step_given_no_image_creates_nothing_and_names_its_input(on_the_cluster,
                                                                    no_cluster_calls,
                                                                    synthetic_dataset,
                                                                    tmp_path, monkeypatch):
    """The pods' image comes from the step's inputs alone: not from the environment, where
    FMNIST_COMPONENT_IMAGE only records the step's own image for lineage."""
    from fmnist_kfp.kfp_components.batch_predict.step import scoring_backend
    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.kfp_components.tune.step import tune_step

    monkeypatch.setenv("FMNIST_COMPONENT_IMAGE", IMAGE)
    with pytest.raises(UserInputError, match="no image for the pods.*step's image input"):
        train_step(config=TrainingConfig(model_type="basic"),
                   data_dir=str(synthetic_dataset), model_dir=str(tmp_path / "model"),
                   backend="kubernetes", launcher_options={})
    with pytest.raises(UserInputError, match="no image for the pods.*step's image input"):
        tune_step(model_type="basic", base=TrainingConfig(model_type="basic"),
                  tuning={"algorithm": "random"}, data_dir=str(synthetic_dataset),
                  output_dir=str(tmp_path / "search"), backend="kubernetes")
    with pytest.raises(UserInputError, match="no image for the pods.*step's image input"):
        scoring_backend("kubernetes", {"namespace": "team-a"})
    with pytest.raises(UserInputError, match="asks for 1 GPU.*gpu_image input"):
        train_step(config=TrainingConfig(model_type="basic"),
                   data_dir=str(synthetic_dataset), model_dir=str(tmp_path / "model"),
                   backend="kubernetes", gpus_per_worker=1, image=IMAGE)
    assert list(on_the_cluster.iterdir()) == []  # nothing staged


def test_what_a_trainjob_cannot_do_is_refused_before_anything(on_the_cluster, real_cluster,
                                                              synthetic_dataset, tmp_path,
                                                              capsys):
    """operator trainjob with an evaluator: refused with the reason after the real API server
    was asked which operator it has (only reads, seen by a fault-free fault proxy), before
    anything is staged or created."""
    from kubernetes import client

    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.kubernetes.training_operators import ClusterDiscovery
    from localcluster.fault_proxy import FaultProxy

    real_cluster.apply_training_runtime()  # the runtime is there: what is refused is the job
    with FaultProxy(real_cluster.kubeconfig) as proxy:  # no seed: a faithful recorder
        with pytest.raises(UserInputError, match="cannot run as a TrainJob.*evaluator needs a "
                                                 "replica apart from training"):
            train_step(config=TrainingConfig(model_type="basic"),
                       data_dir=str(synthetic_dataset), model_dir=str(tmp_path / "model"),
                       backend="kubernetes", evaluator=True, image=IMAGE,
                       launcher_options={"operator": "trainjob"},
                       discovery=ClusterDiscovery(client.ApiClient(proxy.configuration())))
    assert "training operator: trainjob" in capsys.readouterr().out
    assert proxy.requests and {method for method, *_ in proxy.requests} == {"GET"}
    assert list(on_the_cluster.iterdir()) == []  # nothing staged


def test_a_cluster_without_either_operator_is_refused_naming_both(on_the_cluster,
                                                                  synthetic_dataset, tmp_path):
    from fmnist_kfp.kfp_components.train.step import train_step
    from tests.fmnist_kfp.kubernetes.test_trainjob import Static

    with pytest.raises(UserInputError, match="serves neither.*manifests/trainer-runtime.*"
                                             "Training Operator v1"):
        train_step(config=TrainingConfig(model_type="basic"),
                   data_dir=str(synthetic_dataset), model_dir=str(tmp_path / "model"),
                   backend="kubernetes", image=IMAGE, discovery=Static())
    assert list(on_the_cluster.iterdir()) == []
