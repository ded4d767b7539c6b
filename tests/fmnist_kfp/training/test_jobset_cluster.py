"""TF_CONFIG on Kubeflow Trainer v2: fmnist_kfp.training.jobset_cluster.tf_config_from_jobset.

The names it builds follow the upstream rules its docstring cites (kubeflow/trainer v2.1.0 and
v2.2.0 plugins/jobset/jobset.go, jobset v0.10.1 jobset_controller.go and placement.go,
Kubernetes' Indexed Job); tests/UPSTREAM.md lists them."""

from __future__ import annotations

import json

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.training import jobset_cluster
from fmnist_kfp.training.distributed import ClusterRole, export_tf_config, tf_config_from_env
from fmnist_kfp.training.jobset_cluster import tf_config_from_jobset


def pod_env(index: int = 0, nodes: int = 3, **extra: str) -> dict[str, str]:
    """What a pod of TrainJob "mnist" on the runtime fmnist-tensorflow has."""
    return {"JOB_COMPLETION_INDEX": str(index), "FMNIST_JOBSET_NAME": "mnist",
            "FMNIST_REPLICATED_JOB": "node", "FMNIST_JOB_INDEX": "0",
            "FMNIST_TF_PORT": "2222", "FMNIST_NUM_NODES": str(nodes), **extra}


def test_every_node_is_a_worker_named_as_the_jobset_names_its_pod():
    # <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain = jobset name>:<port>, as
    # Trainer's own endpoints (kubeflow/trainer v2.1.0 plugins/jobset/jobset.go line 227).
    config = tf_config_from_jobset(pod_env(index=2))
    assert config == {
        "cluster": {"worker": ["mnist-node-0-0.mnist:2222", "mnist-node-0-1.mnist:2222",
                               "mnist-node-0-2.mnist:2222"]},
        "task": {"type": "worker", "index": 2},
        "environment": "cloud",
    }


def test_the_names_follow_the_replicated_job_the_job_index_and_the_port():
    config = tf_config_from_jobset(pod_env(index=1, nodes=2, FMNIST_REPLICATED_JOB="trainer",
                                           FMNIST_JOB_INDEX="3", FMNIST_TF_PORT="5000"))
    assert config["cluster"]["worker"] == ["mnist-trainer-3-0.mnist:5000",
                                           "mnist-trainer-3-1.mnist:5000"]
    assert jobset_cluster.node_hostname("mnist", 1) == "mnist-node-0-1"


def test_node_0_is_worker_0_which_does_the_chiefs_work():
    chief = ClusterRole.from_env(pod_env(index=0, nodes=2))
    other = ClusterRole.from_env(pod_env(index=1, nodes=2))
    assert chief.is_chief and chief.name == "worker-0" and chief.num_workers == 2
    assert not other.is_chief and other.num_workers == 2
    assert chief.strategy == other.strategy == "multi_worker_mirrored"
    assert not chief.has_chief and not chief.has_evaluator


def test_a_single_node_gets_no_tf_config_as_a_one_replica_tfjob():
    assert tf_config_from_jobset(pod_env(index=0, nodes=1)) is None
    assert ClusterRole.from_env(pod_env(index=0, nodes=1)) == ClusterRole("worker", 0, 1)


def test_outside_a_jobset_there_is_nothing_to_build():
    assert tf_config_from_jobset({}) is None
    # An Indexed Job's index alone (say, a batch scoring Job) is not our runtime's pod.
    assert tf_config_from_jobset({"JOB_COMPLETION_INDEX": "0", "PATH": "/bin"}) is None


@pytest.mark.parametrize("missing", jobset_cluster.REQUIRED_VARIABLES)
def test_a_partial_environment_names_what_is_missing(missing):
    env = pod_env()
    del env[missing]
    with pytest.raises(UserInputError, match=missing) as error:
        tf_config_from_jobset(env)
    assert "manifests/trainer-runtime" in str(error.value)


def test_an_empty_variable_counts_as_missing():
    with pytest.raises(UserInputError, match="FMNIST_NUM_NODES"):
        tf_config_from_jobset(pod_env(FMNIST_NUM_NODES=" "))


@pytest.mark.parametrize(("name", "value"), [("FMNIST_NUM_NODES", "two"),
                                             ("FMNIST_NUM_NODES", "0"),
                                             ("JOB_COMPLETION_INDEX", "-1"),
                                             ("FMNIST_TF_PORT", "70000"),
                                             ("FMNIST_JOB_INDEX", "x")])
def test_malformed_numbers_are_named(name, value):
    with pytest.raises(UserInputError, match=f"{name}={value!r}"):
        tf_config_from_jobset(pod_env(**{name: value}))


def test_an_index_beyond_the_node_count_says_the_env_must_match_num_nodes():
    # FMNIST_NUM_NODES is the TrainJob's trainer.env; numNodes sets the pod count.
    with pytest.raises(UserInputError, match="must equal its trainer.numNodes"):
        tf_config_from_jobset(pod_env(index=3, nodes=3))


def test_loopback_ports_replace_the_dns_names_and_nothing_else():
    env = pod_env(index=1, nodes=3, FMNIST_LOOPBACK_PORTS="4001, 4002,4003")
    on_cluster = tf_config_from_jobset(pod_env(index=1, nodes=3))
    local = tf_config_from_jobset(env)
    assert local["cluster"]["worker"] == ["127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4003"]
    assert {**local, "cluster": None} == {**on_cluster, "cluster": None}


@pytest.mark.parametrize("ports", ["4001,4002", "4001,4002,x", "4001,4002,0"])
def test_loopback_ports_must_be_one_port_per_node(ports):
    with pytest.raises(UserInputError, match="FMNIST_LOOPBACK_PORTS"):
        tf_config_from_jobset(pod_env(nodes=3, FMNIST_LOOPBACK_PORTS=ports))


def test_tf_config_wins_over_the_jobset_environment():
    given = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    env = {**pod_env(index=0, nodes=3), "TF_CONFIG": json.dumps(given)}
    assert tf_config_from_env(env) == given
    assert ClusterRole.from_env(env).task_index == 1


def test_the_trainer_exports_the_built_tf_config_once():
    env = pod_env(index=1, nodes=2)
    built = export_tf_config(env)
    assert json.loads(env["TF_CONFIG"]) == built == tf_config_from_jobset(pod_env(1, 2))
    assert export_tf_config(env) is None  # TF_CONFIG is now set: left as it is
    single = pod_env(index=0, nodes=1)
    assert export_tf_config(single) is None and "TF_CONFIG" not in single


def test_what_the_runtime_cannot_run_is_refused_with_the_reason():
    assert jobset_cluster.cluster_problems("multi_worker_mirrored", False, False) == []
    problems = jobset_cluster.cluster_problems("parameter_server", True, True)
    assert len(problems) == 3
    assert all("one replicated job `node`" in p for p in problems)
    assert "multi_worker_mirrored" in problems[0]
    assert "evaluator false" in problems[1]
    assert "add one to num_workers" in problems[2]
