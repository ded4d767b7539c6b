"""The local backend with Trainer v2's JobSet environment (``cluster_env="jobset"``): each node
gets what a pod of the runtime fmnist-tensorflow gets and no TF_CONFIG, so that the trainer's
own TF_CONFIG (fmnist_kfp.training.jobset_cluster) is what real multi-worker training runs on."""

from __future__ import annotations

import io
import json
import sys

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training import jobset_cluster
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests import launcher_harness as harness

pytestmark = pytest.mark.timeout(240)


def _env_reporting_worker(self, python: str = sys.executable) -> list[str]:
    """A stand-in trainer that records its environment and reports success."""
    script = ("import json, os, sys; work = sys.argv[1]; os.makedirs(work, exist_ok=True); "
              "open(os.path.join(work, 'env-' + str(os.getpid())), 'w')"
              ".write(json.dumps(dict(os.environ))); "
              "open(os.path.join(work, 'result.json'), 'w').write('{}'); print('ready')")
    return [python, "-c", script, self.work_dir]


def _stub_spec(tmp_path, **values) -> TrainingJobSpec:
    return TrainingJobSpec(**{"name": "mnist", "config": TrainingConfig(),
                              "data_dir": str(tmp_path), "export_dir": str(tmp_path / "w" / "1"),
                              "work_dir": str(tmp_path / "w"), **values})


@pytest.mark.parametrize("nodes", [1, 3])
def test_each_node_gets_the_jobset_env_and_no_tf_config(nodes, tmp_path, monkeypatch):
    monkeypatch.setattr(TrainingJobSpec, "trainer_command", _env_reporting_worker)
    monkeypatch.setenv("TF_CONFIG", '{"inherited": true}')  # never passed on
    monkeypatch.setenv("FMNIST_NUM_NODES", "9")  # nor what the launcher does not set itself
    log = io.StringIO()
    LocalProcessLauncher(out=log, cluster_env="jobset").run(_stub_spec(tmp_path,
                                                                       num_workers=nodes))
    envs = [json.loads(p.read_text()) for p in (tmp_path / "w").glob("env-*")]
    assert len(envs) == nodes
    assert not any("TF_CONFIG" in env for env in envs)
    assert sorted(env["JOB_COMPLETION_INDEX"] for env in envs) == [str(i) for i in range(nodes)]
    ports = {env["FMNIST_LOOPBACK_PORTS"] for env in envs}
    assert len(ports) == 1 and len(ports.pop().split(",")) == nodes
    for env in envs:
        assert {k: env[k] for k in ("FMNIST_JOBSET_NAME", "FMNIST_REPLICATED_JOB",
                                    "FMNIST_JOB_INDEX", "FMNIST_TF_PORT", "FMNIST_NUM_NODES")} \
            == {"FMNIST_JOBSET_NAME": "mnist", "FMNIST_REPLICATED_JOB": "node",
                "FMNIST_JOB_INDEX": "0", "FMNIST_TF_PORT": "2222",
                "FMNIST_NUM_NODES": str(nodes)}
        config = jobset_cluster.tf_config_from_jobset(env)
        if nodes == 1:
            assert config is None  # one node trains alone, as a one-node TrainJob's pod
        else:
            assert config["task"]["index"] == int(env["JOB_COMPLETION_INDEX"])
            assert all(w.startswith("127.0.0.1:") for w in config["cluster"]["worker"])
    # Named as the JobSet names the pods: <job>-node-0-<i>.
    output = log.getvalue()
    assert all(f"[mnist/node-0-{i}] ready" in output for i in range(nodes)), output
    assert f"starting {nodes} process(es): {nodes} node(s) with the JobSet environment" in output


@pytest.mark.parametrize(("values", "fix"), [
    ({"strategy": "parameter_server", "num_ps": 1}, "use strategy multi_worker_mirrored"),
    ({"evaluator": True}, "set evaluator false"),
    ({"use_chief": True}, "add one to num_workers"),
])
def test_what_a_trainjob_cannot_be_is_refused_before_any_process_starts(values, fix, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setattr(TrainingJobSpec, "trainer_command", _env_reporting_worker)
    launcher = LocalProcessLauncher(out=io.StringIO(), cluster_env="jobset")
    with pytest.raises(UserInputError, match=fix) as error:
        launcher.run(_stub_spec(tmp_path, num_workers=2, **values))
    assert "one replicated job `node`" in str(error.value)
    assert launcher.workers == [] and not (tmp_path / "w").exists()


def test_an_unknown_cluster_env_is_refused():
    with pytest.raises(UserInputError, match="cluster_env must be one of tfjob, jobset"):
        LocalProcessLauncher(cluster_env="trainjob")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_nodes_with_the_jobset_env_train_as_the_tf_config_path_does(tmp_path,
                                                                        synthetic_dataset):
    """The same 2-worker job (seed, data, hyperparameters) once with the training operator's
    TF_CONFIG and once with the JobSet environment, whose TF_CONFIG each trainer builds: both
    train one model across both workers, to the same accuracy within noise."""
    results = {}
    logs = {}
    for cluster_env in ("tfjob", "jobset"):
        log = io.StringIO()
        root = tmp_path / cluster_env
        spec = harness.job_spec(root, synthetic_dataset, name="two-nodes", num_workers=2,
                                config=TrainingConfig(model_type="basic", epochs=2,
                                                      batch_size=32, seed=7))
        results[cluster_env] = LocalProcessLauncher(out=log, cluster_env=cluster_env).run(spec)
        logs[cluster_env] = log.getvalue()
        assert (root / "model" / "1" / "saved_model.pb").exists(), logs[cluster_env]
        assert "MultiWorkerMirroredStrategy over 2 workers" in logs[cluster_env]
    jobset_log = logs["jobset"]
    # Each node built its TF_CONFIG from the JobSet environment, as on the cluster.
    assert "[two-nodes/node-0-0] TF_CONFIG from the JobSet environment: worker 0" in jobset_log
    assert "[two-nodes/node-0-1] TF_CONFIG from the JobSet environment: worker 1" in jobset_log
    assert "TF_CONFIG from the JobSet environment" not in logs["tfjob"]
    tfjob, jobset = (results[k].result for k in ("tfjob", "jobset"))
    assert jobset["replicas"] == tfjob["replicas"] == 2
    assert jobset["global_batch_size"] == tfjob["global_batch_size"] == 64
    assert [e["epoch"] for e in jobset["history"]] == [e["epoch"] for e in tfjob["history"]] \
        == [1, 2]
    # Every epoch's accuracies (training and validation) agree within noise.
    for ours, theirs in zip(jobset["history"], tfjob["history"], strict=True):
        for key in (k for k in theirs if "accuracy" in k):
            assert abs(ours[key] - theirs[key]) <= 0.05, (key, ours, theirs)
    assert jobset["final_metrics"]["accuracy"] > 0.8, jobset_log
