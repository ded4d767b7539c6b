"""The train step on Kubernetes checks each rule of its job once (issue 43: the job spec was
validated three times, the TFJob and TrainJob rules by the step, the launcher and the builder
again), all before the dataset is staged; the launcher runs the job as the step checked it."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.training import TrainingConfig
from tests.call_counts import count_rules

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"


class _Served:
    """API discovery of a cluster that serves one operator's jobs."""

    def __init__(self, operator: str):
        self.operator = operator

    def serves(self, group_version, plural):
        return plural == ("tfjobs" if self.operator == "tfjob" else "trainjobs")

    def runtime_exists(self, name):
        return True

    def trainjob_fields(self):
        return {"runtimePatches"}


class _Created(Exception):
    """The launcher got as far as the create call."""


def _train(tmp_path, dataset, operator: str, made: dict, **values):
    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
    from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher

    def make_launcher(settings, chosen, shape):
        launcher_class = TFJobLauncher if chosen == "tfjob" else TrainJobLauncher

        class Launcher(launcher_class):
            def run(self, job):
                made["job"] = self.checked(job)  # as the real launchers take it
                made["manifest"] = made["job"].manifest()
                raise _Created()
        return Launcher(settings)

    volume = tmp_path / "volume"
    return train_step(
        config=TrainingConfig(model_type="basic"), data_dir=str(dataset),
        model_dir=str(tmp_path / "model"), backend="kubernetes",
        launcher_options={"namespace": "team-a", "pvc_name": "fmnist-data",
                          "mount_path": str(volume), "operator": operator},
        image=IMAGE, make_launcher=make_launcher, create_tensorboard=lambda manifest: None,
        discovery=_Served(operator), **values)


@pytest.mark.parametrize("operator", ["tfjob", "trainjob"])
def test_each_rule_of_the_train_job_runs_once(operator, monkeypatch, tmp_path,
                                              synthetic_dataset):
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    counts = count_rules(monkeypatch)
    made: dict = {}
    with pytest.raises(_Created):
        _train(tmp_path, synthetic_dataset, operator, made, num_workers=2)
    assert counts == {
        "the training configuration": 1, "the job's replicas": 1, "the pods' settings": 1,
        ("what a TFJob cannot do" if operator == "tfjob" else "what a TrainJob cannot do"): 1}
    job = made["job"]
    assert (job.operator, job.spec.num_workers) == (operator, 2)
    # The job was made with the staged dataset's path, where the step then staged it.
    staged = job.spec.data_dir
    assert staged.startswith(str(tmp_path / "volume" / "datasets"))
    assert (tmp_path / "volume" / "datasets").joinpath(staged.rsplit("/", 1)[-1],
                                                       "metadata.json").exists()


def test_what_the_operator_cannot_do_is_refused_before_the_dataset_is_staged(
        monkeypatch, tmp_path, synthetic_dataset):
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    with pytest.raises(UserInputError, match="cannot run as a TrainJob.*evaluator"):
        _train(tmp_path, synthetic_dataset, "trainjob", {}, evaluator=True)
    assert not (tmp_path / "volume" / "datasets").exists()
