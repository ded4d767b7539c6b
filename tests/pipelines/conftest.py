"""The one local run on the real data that the end-to-end tests of tests/pipelines share: it
takes minutes, and each test reads a different part of it (what the terminal showed, the log,
the summary, the report, the lineage, batch prediction, TensorBoard) or runs again from its
cache."""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from fmnist_kfp.settings.pipeline import PipelineParameters

# Noon of one 24-hour window: far from both of its edges.
NOON = 86400 * 20_000 + 12 * 3600


@dataclass(frozen=True)
class RealRun:
    root: Path  # the pipeline root (its kfp.local cache is in it)
    summary_path: Path
    summary: dict
    parameters: PipelineParameters
    terminal: str  # what `fmnist-kfp run --local` printed (stdout and stderr), no --verbose
    exit_code: int


@pytest.fixture(scope="package")
def real_run(real_data_dir, tmp_path_factory):
    """``fmnist-kfp run --local`` as a user types it (in this process, its terminal
    captured): every model type, one epoch on 3,000 real training images, batch prediction in
    two workers; the freshness step's clock pinned at :data:`NOON`, the local deployment in the
    run's own directory (stopped after the package's tests)."""
    from fmnist_kfp.cli import main
    from fmnist_kfp.dataset.freshness import CLOCK_ENV
    from fmnist_kfp.serving.deploy.local_deployer import stop_server

    directory = tmp_path_factory.mktemp("real-run")
    parameters = PipelineParameters(
        data_source=str(real_data_dir), train_examples=3000, epochs=1, batch_size=64,
        prediction_images=300, verification_images=100, batch_prediction_workers=2)
    saved = {name: os.environ.get(name) for name in (CLOCK_ENV, "FMNIST_SERVING_STATE_DIR")}
    os.environ["FMNIST_SERVING_STATE_DIR"] = str(directory / "serving")
    os.environ[CLOCK_ENV] = str(NOON)
    summary_path = directory / "out" / "summary.json"
    terminal = io.StringIO()
    try:
        with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
            code = main([
                "run", "--local", "--data-source", str(real_data_dir), "--train-examples",
                "3000", "--epochs", "1", "--batch-size", "64", "--prediction-images", "300",
                "--verification-images", "100", "--batch-prediction-workers", "2",
                "--pipeline-root", str(directory / "runs"), "--summary", str(summary_path)])
        assert code == 0, terminal.getvalue()
        summary = json.loads(summary_path.read_text())
        yield RealRun(directory / "runs", summary_path, summary, parameters,
                      terminal.getvalue(), code)
    finally:
        stop_server(parameters.model_name)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
