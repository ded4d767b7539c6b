"""``TF_CONFIG`` for a node of a Kubeflow Trainer v2 TrainJob, built from the pod's environment.

Trainer v2 builds no ``TF_CONFIG`` (it ships no TensorFlow runtime, kubeflow/trainer#2443): our
ClusterTrainingRuntime ``fmnist-tensorflow`` (``manifests/trainer-runtime``) gives each pod what
it needs to build its own, and :func:`tf_config_from_jobset` is the one place that turns that
into host names. Nothing else in this package guesses a JobSet pod's name: what must know one
(a length check, a stand-in) calls :func:`node_hostname`.

The environment contract (every variable a string):

=======================  ============================================================
``JOB_COMPLETION_INDEX``   the pod's index in its Indexed Job (Kubernetes sets it):
                           node ``i``; node 0 is ``TF_CONFIG`` worker 0, the chief
``FMNIST_JOBSET_NAME``     the JobSet's name (label ``jobset.sigs.k8s.io/jobset-name``
                           through the downward API), the TrainJob's name
``FMNIST_REPLICATED_JOB``  the replicated job's name (label
                           ``jobset.sigs.k8s.io/replicatedjob-name``): ``node``
``FMNIST_JOB_INDEX``       the Job's index in its replicated job (label
                           ``jobset.sigs.k8s.io/job-index``): ``0``
``FMNIST_TF_PORT``         the port every node's TensorFlow server listens on (the
                           runtime's, also its ``containerPort``)
``FMNIST_NUM_NODES``       how many nodes the job has (the TrainJob's ``trainer.env``,
                           which our builder sets to ``trainer.numNodes``)
``FMNIST_LOOPBACK_PORTS``  local runs only (the local backend's ``cluster_env="jobset"``):
                           ``p0,p1,...``, node ``i`` listening on ``127.0.0.1:p_i``
                           instead of its DNS name; never set on a cluster
=======================  ============================================================

Where the names come from (read at these tags):

* The JobSet is named after the TrainJob (kubeflow/trainer v2.1.0
  ``pkg/runtime/framework/plugins/jobset/jobset.go`` line 284, v2.2.0 line 303), and with
  ``enableDNSHostnames`` its pods live under the subdomain of the JobSet's name when the runtime
  names none (jobset v0.10.1 ``pkg/controllers/jobset_controller.go`` ``GetSubdomain`` lines
  835-844, set on the Job's pod template at lines 708-712, the headless Service of that name at
  616-661; Trainer's own endpoints, ``jobset.go`` v2.1.0 lines 216-227, v2.2.0 229-240, say
  ``<trainjob>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>``).
* The Job is named ``<jobset>-<replicatedJob>-<jobIndex>`` (jobset v0.10.1
  ``pkg/util/placement/placement.go`` ``GenJobName`` lines 14-16), and Trainer makes one Job of
  the trainer's replicated job (``builder.go`` v2.1.0 line 123: ``replicas`` 1), whose
  parallelism and completions are ``numNodes`` (``jobset.go`` v2.1.0 lines 261-265).
* The JobSet labels every pod with its name, the replicated job and the job index (jobset v0.10.1
  ``jobset_controller.go`` ``labelAndAnnotateObject`` lines 765-797, keys in
  ``api/jobset/v1alpha2/jobset_types.go`` lines 23-35), and defaults ``completionMode`` to
  ``Indexed`` (``pkg/webhooks/jobset_webhook.go`` lines 120-123).
* Kubernetes' Job controller names each pod of an Indexed Job ``<job>-<index>`` as its hostname
  and gives it ``JOB_COMPLETION_INDEX`` (kubernetes/kubernetes ``pkg/controller/job/
  job_controller.go`` ``manageJob``: ``template.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name,
  completionIndex)``; ``indexed_job_utils.go`` ``addCompletionIndexEnvVariables``; KEP-2214).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fmnist_kfp.errors import UserInputError

COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
JOBSET_NAME = "FMNIST_JOBSET_NAME"
REPLICATED_JOB = "FMNIST_REPLICATED_JOB"
JOB_INDEX = "FMNIST_JOB_INDEX"
TF_PORT = "FMNIST_TF_PORT"
NUM_NODES = "FMNIST_NUM_NODES"
LOOPBACK_PORTS = "FMNIST_LOOPBACK_PORTS"
# Set by the runtime (or by the TrainJob's trainer.env): any of them means a JobSet pod.
RUNTIME_VARIABLES = (JOBSET_NAME, REPLICATED_JOB, JOB_INDEX, TF_PORT, NUM_NODES)
REQUIRED_VARIABLES = (COMPLETION_INDEX, *RUNTIME_VARIABLES)
# The runtime's names (manifests/trainer-runtime; tests hold them together).
REPLICATED_JOB_NAME = "node"
DEFAULT_TF_PORT = 2222


def node_hostname(jobset_name: str, node_index: int, replicated_job: str = REPLICATED_JOB_NAME,
                  job_index: int = 0) -> str:
    """The hostname of node ``node_index``'s pod: ``<jobset>-<replicatedJob>-<jobIndex>-<pod>``
    (the Job's name, then the pod's completion index; see the module docstring)."""
    return f"{jobset_name}-{replicated_job}-{job_index}-{node_index}"


def node_address(jobset_name: str, node_index: int, port: int,
                 replicated_job: str = REPLICATED_JOB_NAME, job_index: int = 0) -> str:
    """``host.subdomain:port`` of a node, the subdomain being the JobSet's name."""
    return (f"{node_hostname(jobset_name, node_index, replicated_job, job_index)}"
            f".{jobset_name}:{port}")


def _integer(env: Mapping[str, str], name: str, lowest: int, highest: int | None = None) -> int:
    """``env[name]`` as a whole number within bounds, or an error naming the variable."""
    raw = env[name].strip()
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < lowest or (highest is not None and value > highest):
        bounds = f"from {lowest} to {highest}" if highest is not None else f"{lowest} or more"
        raise UserInputError(f"{name}={raw!r} is not a whole number {bounds}: the pod's "
                             "environment does not match the runtime fmnist-tensorflow "
                             "(kubectl apply -k manifests/trainer-runtime)")
    return value


def _loopback_ports(raw: str, num_nodes: int) -> list[int]:
    """``FMNIST_LOOPBACK_PORTS``'s ports, one per node, or an error naming the variable."""
    parts = [p.strip() for p in raw.split(",")]
    try:
        ports = [int(p) for p in parts]
    except ValueError:
        ports = []
    if len(ports) != num_nodes or not all(0 < p < 65536 for p in ports):
        raise UserInputError(
            f"{LOOPBACK_PORTS}={raw!r} must list {num_nodes} port(s) (one per node, "
            f"{NUM_NODES}={num_nodes}), comma-separated; it is for local runs only")
    return ports


def tf_config_from_jobset(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The ``TF_CONFIG`` of this pod of a TrainJob on the runtime ``fmnist-tensorflow``.

    Every node is a ``worker`` (``MultiWorkerMirroredStrategy``; worker 0, the node with
    completion index 0, does the chief's work: checkpoints, export). None when ``env`` has
    none of the runtime's variables (not a JobSet pod) or the job has one node (which then
    trains without ``TF_CONFIG``, as the training operator gives a one-replica TFJob none).
    A partial or malformed environment raises :class:`~fmnist_kfp.errors.UserInputError`
    naming the variables."""
    if not any(env.get(name, "").strip() for name in RUNTIME_VARIABLES):
        return None
    missing = [name for name in REQUIRED_VARIABLES if not env.get(name, "").strip()]
    if missing:
        raise UserInputError(
            f"this pod has part of the Trainer v2 environment but not {', '.join(missing)}: "
            f"{COMPLETION_INDEX} comes from an Indexed Job, {NUM_NODES} from the TrainJob's "
            "trainer.env, the rest from the runtime fmnist-tensorflow "
            "(kubectl apply -k manifests/trainer-runtime; TF_CONFIG is built from all of them)")
    num_nodes = _integer(env, NUM_NODES, 1)
    index = _integer(env, COMPLETION_INDEX, 0)
    if index >= num_nodes:
        raise UserInputError(
            f"{COMPLETION_INDEX}={index} is not below {NUM_NODES}={num_nodes}: the TrainJob's "
            f"trainer.env {NUM_NODES} must equal its trainer.numNodes")
    port = _integer(env, TF_PORT, 1, 65535)
    job_index = _integer(env, JOB_INDEX, 0)
    jobset, replicated_job = env[JOBSET_NAME].strip(), env[REPLICATED_JOB].strip()
    if num_nodes == 1:
        return None
    loopback = env.get(LOOPBACK_PORTS, "").strip()
    if loopback:
        workers = [f"127.0.0.1:{p}" for p in _loopback_ports(loopback, num_nodes)]
    else:
        workers = [node_address(jobset, i, port, replicated_job, job_index)
                   for i in range(num_nodes)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index},
            "environment": "cloud"}


def cluster_problems(strategy: str, use_chief: bool, evaluator: bool) -> list[str]:
    """What a job on the runtime ``fmnist-tensorflow`` cannot be, each with the reason and the
    fix (empty: it can run). The runtime has one replicated job, ``node``, every pod of it a
    ``TF_CONFIG`` worker, and a TrainJob can set only that job's node count and env
    (kubeflow/trainer v2.1.0 ``plugins/plainml/plainml.go`` lines 52-63), nothing of other
    replicated jobs: no parameter servers, no evaluator beside it, no chief apart from node 0
    (in v2.2.0 ``runtimePatches`` can patch other jobs' templates, but a runtime would still
    have to define them, and a ``ps`` job never exits, so a JobSet's success would need a
    success policy naming the chief's job: not expressed by this runtime)."""
    why = ("a TrainJob on the runtime fmnist-tensorflow runs one replicated job `node`, all "
           "of whose pods are TF_CONFIG workers, and Trainer v2 lets a TrainJob set only that "
           "job's node count")
    problems = []
    if strategy == "parameter_server":
        problems.append(f"strategy parameter_server needs chief, worker and ps replicas, but {why}"
                        ": use strategy multi_worker_mirrored, or the TFJob operator "
                        "(kubernetes.operator tfjob)")
    if evaluator:
        problems.append(f"evaluator needs a replica apart from training, but {why}: set evaluator "
                        "false (the chief's per-epoch validation still runs), or use the TFJob "
                        "operator (kubernetes.operator tfjob)")
    if use_chief:
        problems.append(f"use_chief asks for a separate Chief replica, but {why} and node 0 does "
                        "the chief's work (checkpoints, export): set use_chief false and add one "
                        "to num_workers for the same number of training processes")
    return problems
