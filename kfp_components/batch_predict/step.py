"""The batch prediction step: the selected model scores a dataset in shards, locally in worker
processes or on Kubernetes in an Indexed Job, and the step records the counts.

Layout of the output (the KFP ``Dataset`` artifact)::

    predictions-00000-of-00002.jsonl   one row per input (id, class, class_name, probabilities,
    predictions-00001-of-00002.jsonl   label when known; or id and error)
    shards/00000-of-00002.json         each shard's counts
    summary.json                       rows, predictions, error rows, accuracy
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmnist_kfp.backends import require_backend
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.kubernetes.names import stable_name
from fmnist_kfp.scoring.inputs import list_source
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec

ROW_FORMAT = ("JSON Lines: id, class, class_name, probabilities (10), label when known; "
              "an unreadable input is a row with id and error")


def job_name(output_dir: str) -> str:
    """The job's name, stable across retries of the step (a retry re-attaches to its Job)."""
    return stable_name("fmnist-batch", output_dir)


def scoring_backend(backend: str, options: dict[str, Any], image: str = ""):
    """Worker processes here, or an Indexed Job on the cluster whose pods run ``image`` with
    the compiled platform's claim under the user's ``kubernetes`` parameter (``options``),
    checked here, once."""
    require_backend("batch prediction", backend)
    if backend == "local":
        from fmnist_kfp.batch.local_scorer import LocalBatchScorer

        return LocalBatchScorer()
    from fmnist_kfp.batch.indexed_job_scorer import IndexedJobScorer
    from fmnist_kfp.settings.jobs import cluster_settings

    return IndexedJobScorer(cluster_settings(options, image=image))


@dataclass(frozen=True)
class BatchPredictionResult:
    """What one batch prediction scored. The ``Dataset`` artifact's metadata and the metrics
    the step logs are :meth:`artifact_metadata` and :meth:`metrics`."""

    source: str  # "" for the ingested test split
    rows: int
    predicted: int
    errors: int  # rows of inputs that could not be read
    labelled: int
    files: int
    accuracy: float | None  # None when no input has a label
    workers: int
    backend: str
    job_name: str
    job_seconds: float
    scoring_images_per_second: float

    @property
    def images_per_second(self) -> float:
        """Rows per second of the whole job, start-up included."""
        return round(self.rows / self.job_seconds, 1) if self.job_seconds else 0.0

    def artifact_metadata(self) -> dict[str, Any]:
        return {
            "source": self.source or "the ingested test split",
            "format": ROW_FORMAT,
            "rows": self.rows, "predicted": self.predicted, "errors": self.errors,
            "labelled": self.labelled, "files": self.files,
            "accuracy": self.accuracy,
            "workers": self.workers,
            "backend": self.backend,
            "job_name": self.job_name,
            "job_seconds": self.job_seconds,
            "images_per_second": self.images_per_second,
            "scoring_images_per_second": self.scoring_images_per_second,
        }

    def metrics(self) -> dict[str, float]:
        values = {"rows": float(self.rows), "error_rows": float(self.errors),
                  "images_per_second": self.images_per_second}
        if self.accuracy is not None:
            values["accuracy"] = self.accuracy
        return values

    def kfp_outputs(self) -> StepOutputs:
        """The predictions' metadata and the metrics."""
        return StepOutputs(metadata=self.artifact_metadata(), metrics=self.metrics())


@reports_errors_briefly
def batch_predict_step(*, model_dir: str, data_dir: str, output_dir: str, source: str = "",
                       workers: int = 2, backend: str = "local",
                       kubernetes: dict[str, Any] | None = None, image: str = "",
                       scorer=None) -> BatchPredictionResult:
    """Scores ``source`` (``""``: the dataset's test split) with the model in ``workers``
    shards (on Kubernetes, pods running ``image``) and says what it scored. Bad settings and
    a source that does not exist fail before any worker starts."""
    # The spec checks itself as it is made (the workers among it), the backend its pods'
    # settings: both before the source is listed.
    spec = ScoringJobSpec(name=job_name(output_dir), model_dir=model_dir, data_dir=data_dir,
                          output_dir=output_dir, source=source, num_shards=workers)
    runner = scorer or scoring_backend(backend, dict(kubernetes or {}), image)
    listed = list_source(source, data_dir)
    print(f"batch prediction of {listed.describe()} in {workers} shard(s), {backend}",
          flush=True)
    summary = runner.run(spec)
    return BatchPredictionResult(
        source=source, **{key: summary[key] for key in (
            "rows", "predicted", "errors", "labelled", "files", "accuracy",
            "scoring_images_per_second")},
        workers=workers, backend=backend, job_name=spec.name,
        job_seconds=summary.get("job_seconds") or 0.0)
