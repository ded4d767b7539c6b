"""A compiled pipeline YAML run on the real cluster (tests/cluster.py), each task a Pod.

KFP's backend (its API server, Argo, the driver and launcher, MinIO, ML Metadata) is not built
here. What walks the DAG is KFP's own SDK: ``kfp.local``'s orchestrator (ParallelFor,
``dsl.Collected``, conditions, each task's executor input with the inputs' defaults, its
outputs read back from the executor output), on the YAML a user uploads. Ours are only its
task handler and the run's name (fixed, where kfp.local takes a timestamp). The handler runs
each task as a Pod, as KFP starts a step: the executor's image, command and args (the executor
input in place of ``{{$}}``), its compiled environment, as the ``pipeline-runner``
ServiceAccount, with the claims the YAML's kubernetes platform spec mounts (kfp-kubernetes'
``pvcMount``) and nothing else.

KFP's launcher moves artifacts through its object store, where the executor reads a
``minio://<bucket>/<path>`` artifact at ``/minio/<bucket>/<path>`` (kfp 2.17.0
``kfp/dsl/types/artifact_types.py``, ``_MINIO_LOCAL_MOUNT_PREFIX``). Here the store is a claim
(``ARTIFACT_CLAIM``) every step pod mounts at ``/minio``, and each artifact's URI is the
``minio://`` URI KFP gives it: so the deploy step sees the model artifact's URI as on Kubeflow.
"""

from __future__ import annotations

import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ARTIFACT_CLAIM = "kfp-artifacts"
BUCKET = "mlpipeline"
ARTIFACT_PREFIX = f"{BUCKET}/v2/artifacts"  # KFP's default pipeline root, minio://mlpipeline/v2/artifacts
MINIO_MOUNT = "/minio"
RELEASED = Path(__file__).resolve().parents[1] / "compiled" / "fashion_mnist_pipeline.yaml"


@cache
def released_step(executor: str, compiled: Path = RELEASED) -> tuple[str, dict[str, str]]:
    """The image and environment ``compiled`` (the released pipeline YAML) gives
    ``executor`` (read once)."""
    spec = next(yaml.safe_load_all(compiled.read_text()))
    container = spec["deploymentSpec"]["executors"][executor]["container"]
    return container["image"], {e["name"]: e["value"] for e in container.get("env", [])}


def _platform_mounts(platform: dict) -> dict[str, list[tuple[str, str]]]:
    """Each executor's (claim, mount path) pairs, from the YAML's kubernetes platform spec."""
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return {name: [(m["constant"], m["mountPath"]) for m in config.get("pvcMount", [])]
            for name, config in executors.items()}


def _executor_of_function(spec: dict) -> dict[str, str]:
    """Each executor's label by the Python function it runs (``--function_to_execute``)."""
    found = {}
    for name, executor in spec["deploymentSpec"]["executors"].items():
        args = executor["container"]["args"]
        found[args[args.index("--function_to_execute") + 1]] = name
    return found


def _in_the_store(value: Any, root: str) -> Any:
    """The executor input with kfp.local's local paths under ``root`` made the object
    store's: artifact URIs ``minio://``, output files their ``/minio`` paths."""
    if isinstance(value, dict):
        moved = {}
        for key, item in value.items():
            if isinstance(item, str) and item.startswith(root + "/"):
                rest = item[len(root):]
                item = (f"minio://{ARTIFACT_PREFIX}{rest}" if key == "uri"
                        else f"{MINIO_MOUNT}/{ARTIFACT_PREFIX}{rest}")
            moved[key] = _in_the_store(item, root)
        return moved
    if isinstance(value, list):
        return [_in_the_store(item, root) for item in value]
    return value


def artifact_path(uri: str, store: Path) -> Path:
    """Where an artifact of ``minio://`` URI ``uri`` lies on this machine."""
    assert uri.startswith(f"minio://{BUCKET}/"), uri
    return store / uri.removeprefix("minio://")


class PipelineOnTheCluster:
    """Runs ``compiled`` (a pipeline YAML) in ``namespace`` of ``cluster``: :meth:`run`
    returns the pipeline's outputs; ``pods`` the step pods, in the order they ran, with
    their logs."""

    def __init__(self, cluster, namespace: str, compiled: Path, pod_seconds: float):
        spec, platform = list(yaml.safe_load_all(compiled.read_text()))
        self.cluster, self.namespace, self.compiled = cluster, namespace, compiled
        self.pod_seconds = pod_seconds
        self.mounts = _platform_mounts(platform)
        self.executors = _executor_of_function(spec)
        self.store = cluster.add_claim(namespace, ARTIFACT_CLAIM)  # the object store's bucket
        self.root = self.store / ARTIFACT_PREFIX
        self.pods: list[tuple[str, str, str]] = []  # (executor, pod, log)

    def storage_uri(self, run: str, task: str, output: str) -> str:
        """The pvc:// URI of a task's output artifact: KServe mounts the store's claim."""
        return f"pvc://{ARTIFACT_CLAIM}/{ARTIFACT_PREFIX}/{run}/{task}/{output}"

    def pod(self, executor: str, image: str, command: list[str], env: dict[str, str]) -> dict:
        """The step's Pod, as KFP makes it for ``executor``."""
        from tests.cluster import step_pod

        return step_pod(f"{executor.removeprefix('exec-')}-{uuid.uuid4().hex[:5]}", image, env,
                        command=command,
                        claims=[*self.mounts.get(executor, []), (ARTIFACT_CLAIM, MINIO_MOUNT)])

    def run_task(self, image: str, full_command: list[str], env: dict[str, str]) -> bool:
        """One task as a Pod: whether it succeeded (its log printed, where kfp.local shows a
        step's output)."""
        from kubernetes import client

        command = list(full_command)
        at = command.index("--executor_input") + 1
        command[at] = json.dumps(_in_the_store(json.loads(command[at]), str(self.root)))
        executor = self.executors[command[command.index("--function_to_execute") + 1]]
        pod = self.pod(executor, image, command, env)
        name = pod["metadata"]["name"]
        client.CoreV1Api(self.cluster.api_client).create_namespaced_pod(self.namespace, pod)
        phase, log = self.cluster.pod_finished(self.namespace, name, self.pod_seconds)
        self.pods.append((executor, name, log))
        print(log, flush=True)
        return phase == "Succeeded"

    def run(self, run_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The pipeline run ``run_name`` (its artifacts under ``<root>/<run_name>/``) with
        ``arguments``: its outputs."""
        import pytest
        from kfp import components, local
        from kfp.local import config, executor_input_utils, status, subprocess_task_handler
        from kfp.local.task_handler_interface import ITaskHandler

        on_the_cluster = self

        class PodTaskHandler(ITaskHandler):
            def __init__(self, image, full_command, pipeline_root, runner, env_vars=None):
                self.image, self.full_command, self.env = image, full_command, env_vars or {}

            def run(self):
                ok = on_the_cluster.run_task(self.image, self.full_command, self.env)
                return status.Status.SUCCESS if ok else status.Status.FAILURE

        with pytest.MonkeyPatch.context() as patch:
            # kfp.local's one seam for how a task runs (task_dispatcher picks the handler of
            # the runner's type), and its run name (a timestamp) made the one given.
            patch.setattr(subprocess_task_handler, "SubprocessTaskHandler", PodTaskHandler)
            patch.setattr(executor_input_utils, "get_local_pipeline_resource_name",
                          lambda pipeline_name: run_name)
            patch.setattr(config.LocalExecutionConfig, "instance", None)  # restored after
            local.init(runner=local.SubprocessRunner(use_venv=False),
                       pipeline_root=str(self.root), raise_on_error=True)
            pipeline = components.load_component_from_file(str(self.compiled))
            return dict(pipeline(**arguments).outputs)
