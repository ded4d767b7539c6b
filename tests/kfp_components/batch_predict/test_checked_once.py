"""The batch prediction step on Kubernetes checks its scoring job and its pods' settings once
each (issue 43: both were checked by the step, the scorer and the Job's builder), all before
anything is staged on the shared volume; the Job is built from the spec as it was checked."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from tests.call_counts import count_rules

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"


class _Created(Exception):
    """The scorer got as far as the create call."""


def _predict(tmp_path, dataset, monkeypatch, made: dict, kubernetes=None, **values):
    from fmnist_kfp.batch.indexed_job_scorer import IndexedJobScorer
    from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step
    from fmnist_kfp.kubernetes.runner import RemoteJobRunner

    class Api:
        def create_namespaced_job(self, namespace, manifest):
            made["manifest"] = manifest
            raise _Created()

    class Runner:
        def run(self, job):
            job.create()

    monkeypatch.setattr(IndexedJobScorer, "api", Api())
    monkeypatch.setattr(RemoteJobRunner, "for_job", classmethod(lambda cls, *a, **k: Runner()))
    model = tmp_path / "model"
    (model / "1").mkdir(parents=True)
    (model / "1" / "saved_model.pb").write_bytes(b"")
    return batch_predict_step(
        model_dir=str(model), data_dir=str(dataset), output_dir=str(tmp_path / "out"),
        backend="kubernetes", image=IMAGE,
        kubernetes=kubernetes or {"namespace": "team-a", "pvc_name": "fmnist-data",
                                  "mount_path": str(tmp_path / "volume")}, **values)


def test_the_scoring_job_and_its_pods_settings_are_checked_once(monkeypatch, tmp_path,
                                                                synthetic_dataset):
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    counts = count_rules(monkeypatch)
    made: dict = {}
    with pytest.raises(_Created):
        _predict(tmp_path, synthetic_dataset, monkeypatch, made, workers=3)
    assert counts == {"the scoring job": 1, "the pods' settings": 1}
    job = made["manifest"]
    assert (job["metadata"]["namespace"], job["spec"]["completions"]) == ("team-a", 3)
    # The Job's pods score the model and the dataset where the scorer staged them.
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    volume = str(tmp_path / "volume")
    assert command[command.index("--model-dir") + 1].startswith(f"{volume}/batch/")
    assert command[command.index("--data-dir") + 1].startswith(f"{volume}/datasets/")


@pytest.mark.parametrize(("values", "kubernetes", "words"), [
    ({"workers": 0}, None, "batch_prediction_workers must be in"),
    ({}, {"pvc_name": "fmnist-data", "mount_path": "/v", "cpu": "lots"}, "cpu"),
    ({}, {"namespace": "team-a"}, "needs the shared claim"),
])
def test_bad_parameters_fail_before_anything_is_staged(values, kubernetes, words, monkeypatch,
                                                       tmp_path, synthetic_dataset):
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    if kubernetes and "mount_path" in kubernetes:
        kubernetes = {**kubernetes, "mount_path": str(tmp_path / "volume")}
    with pytest.raises(UserInputError, match=words):
        _predict(tmp_path, synthetic_dataset, monkeypatch, {}, kubernetes=kubernetes, **values)
    assert not (tmp_path / "volume").exists() and not (tmp_path / "out").exists()
