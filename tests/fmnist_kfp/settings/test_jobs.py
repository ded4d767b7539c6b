"""The cluster jobs' settings: what a strategy needs before any replica starts, and the pods'
settings, the compiled platform's under the user's, refused naming the fix when the pods could
not share this step's claim or have no image."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.jobs import cluster_settings, strategy_problems
from fmnist_kfp.settings.platform import MOUNT_PATH, PVC_ENV

IMAGE = "registry.example.com/fmnist-kfp:0.2.0"


def test_a_parameter_server_job_needs_a_server_and_a_worker():
    assert strategy_problems("multi_worker_mirrored", 0, 0) == []
    assert strategy_problems("parameter_server", 2, 1) == []
    problems = strategy_problems("parameter_server", 0, 0)
    assert len(problems) == 2 and "set num_ps to 1 or more" in problems[0]


def test_the_pods_mount_this_steps_claim_unless_told_otherwise(monkeypatch):
    monkeypatch.setenv(PVC_ENV, "fmnist-data")
    settings = cluster_settings({"namespace": ""}, image=IMAGE)
    assert (settings.pvc_name, settings.mount_path, settings.image) == (
        "fmnist-data", MOUNT_PATH, IMAGE)
    with pytest.raises(UserInputError, match="must mount the same claim at the same path"):
        cluster_settings({"pvc_name": "other"}, image=IMAGE)


def test_no_image_or_an_unknown_key_is_refused(monkeypatch):
    monkeypatch.delenv(PVC_ENV, raising=False)
    with pytest.raises(UserInputError, match="no image for the pods"):
        cluster_settings({}, image="")
    with pytest.raises(UserInputError, match="invalid kubernetes settings"):
        cluster_settings({"cpus": "2"}, image=IMAGE)
