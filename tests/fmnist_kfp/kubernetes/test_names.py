"""The names of what a step creates on the cluster: the same for every retry of one task, a
different one for every other task, always a DNS-1035 label the API server accepts."""

from __future__ import annotations

from fmnist_kfp.kubernetes.names import stable_name
from fmnist_kfp.settings.names import is_dns_1035_label

TASK = "minio://mlpipeline/v2/artifacts/fashion-mnist/run-1/train-model/model"


def test_a_retried_task_finds_its_name_and_another_task_gets_another():
    assert stable_name("fmnist-train", TASK) == stable_name("fmnist-train", TASK)
    assert stable_name("fmnist-train", TASK) != stable_name("fmnist-train", TASK + "-2")
    assert stable_name("fmnist-train", TASK).startswith("fmnist-train-")


def test_any_prefix_gives_a_label_within_the_limit():
    for prefix, limit in (("Fmnist_Batch.Job", 63), ("x" * 80, 63), ("fmnist-tune", 40)):
        name = stable_name(prefix, TASK, max_length=limit)
        assert is_dns_1035_label(name) and len(name) <= limit, name
