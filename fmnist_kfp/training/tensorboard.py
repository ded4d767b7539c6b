"""TensorBoard logs of a training job: per-epoch scalars, the graph, and an optional profile.

The chief alone writes, under ``<work_dir>/tensorboard`` (``train/`` and ``validation/``, the
layout Keras' callback makes): the logs travel with the job's output — the model artifact locally,
the shared volume on Kubernetes, where the training step points a Kubeflow ``Tensorboard`` at
them. Other workers of a ``MultiWorkerMirroredStrategy`` job get no callback at all: Keras would
have them write to ``workertemp_<n>`` directories beside the chief's and delete them at the end,
which costs I/O on a shared volume and leaves debris when a worker is killed. Nothing in the
callback takes part in a collective (no histograms: reading batch-norm statistics is an
all-reduce), so the workers may differ in it.
"""

from __future__ import annotations

TENSORBOARD_DIR = "tensorboard"
FIRST_PROFILED_STEP = 2  # step 1 includes tracing the train function


def log_dir(work_dir: str) -> str:
    return f"{work_dir.rstrip('/')}/{TENSORBOARD_DIR}"


def tensorboard_callbacks(work_dir: str, *, is_chief: bool, profile_steps: int = 0) -> list:
    """The callbacks a worker adds: Keras' TensorBoard on the chief, nothing elsewhere.

    Scalars are written once per epoch (``update_freq="epoch"``: no per-step summaries, so no
    batch hooks slow the steps down); ``profile_steps`` > 0 profiles that many steps from the
    second one on (the trace lands in ``train/plugins/profile``)."""
    if not is_chief:
        return []
    import tf_keras as keras

    class EpochGraphTensorBoard(keras.callbacks.TensorBoard):
        """Keras writes the train graph from a batch hook, which runs only while profiling;
        with per-epoch scalars it would never be written, so it is written after epoch 1."""

        _should_write_train_graph: bool  # tf_keras 2.21's own flag, set in its __init__

        def on_epoch_end(self, epoch, logs=None):
            if self._should_write_train_graph:
                self._write_keras_model_train_graph()
                self._should_write_train_graph = False
            super().on_epoch_end(epoch, logs)

    profile = ((FIRST_PROFILED_STEP, FIRST_PROFILED_STEP + profile_steps - 1)
               if profile_steps > 0 else 0)
    return [EpochGraphTensorBoard(log_dir=log_dir(work_dir), histogram_freq=0,
                                  write_graph=True, update_freq="epoch",
                                  profile_batch=profile)]
