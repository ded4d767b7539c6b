"""TensorBoard in training: the chief alone writes, once per epoch, under the job's work
directory (where Kubeflow's Tensorboard reads), and profiles from the second step when asked."""

from __future__ import annotations

from fmnist_kfp.training.tensorboard import FIRST_PROFILED_STEP, log_dir, tensorboard_callbacks


def test_only_the_chief_writes_per_epoch_under_the_work_directory():
    assert tensorboard_callbacks("gs://bucket/run", is_chief=False) == []
    [callback] = tensorboard_callbacks("gs://bucket/run/", is_chief=True)
    assert callback.log_dir == log_dir("gs://bucket/run") == "gs://bucket/run/tensorboard"
    assert callback.update_freq == "epoch"


def test_profiling_starts_after_the_traced_first_step():
    [callback] = tensorboard_callbacks("/tmp/run", is_chief=True, profile_steps=3)
    # tf_keras 2.21 keeps the parsed profile_batch range in these two.
    assert (callback._start_batch, callback._stop_batch) == (
        FIRST_PROFILED_STEP, FIRST_PROFILED_STEP + 2)
    [plain] = tensorboard_callbacks("/tmp/run", is_chief=True)
    assert plain._stop_batch == 0
