"""Batch prediction benchmark: images/s of the batch prediction step's local backend beside
in-process prediction of the same images with the same model.

Writes ``bench/results/batch_prediction.json``. Needs the real Fashion-MNIST
(``$FASHION_MNIST_DIR`` or ``--data-source``); scores its 10,000 test images:

* ``in_process``: the SavedModel's ``serving_pixels`` signature called in this process on the
  images already in memory as float32, in batches of the worker's size (256): the ceiling;
* ``batch_prediction``: the step's local backend with 1 and 2 worker processes on the ingested
  TFRecords, end to end (processes started, TensorFlow and the model loaded, records read and
  parsed, JSON Lines written) and scoring alone (the slowest shard's time after loading);
* ``batch_prediction_png``: the same on a directory of the 10,000 images as PNG files.

The model is the batch-norm CNN with untrained weights: the work per image is the trained
model's, and which class wins does not change the speed. Interleaved rounds; the ratios to
in-process are taken within each round (a shared machine's speed drifts from minute to minute)
and their median reported.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.common import WORK, add_data_source, data_source_missing, ingested_dataset, write_results

BATCH = 256


def exported_model() -> Path:
    """The batch-norm CNN, untrained, exported in the training step's layout."""
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.export import export_saved_model
    from fmnist_kfp.training.models import build_model

    model_dir = WORK / "batch_model"
    if not (model_dir / "1" / "saved_model.pb").exists():
        import tf_keras as keras

        keras.utils.set_random_seed(1)
        export_saved_model(build_model(TrainingConfig(model_type="batchnorm")),
                           str(model_dir / "1"))
    return model_dir


def png_directory(images) -> Path:
    from PIL import Image

    directory = WORK / "test_png"
    if len(list(directory.glob("*.png"))) != len(images):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for index, image in enumerate(images):
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="PNG")
            (directory / f"{index:05d}.png").write_bytes(buffer.getvalue())
    return directory


def in_process(model_dir: Path, images) -> float:
    import numpy as np

    from fmnist_kfp.training.export import load_pixels_predictor

    predict = load_pixels_predictor(str(model_dir / "1"))
    pixels = images.astype(np.float32)
    predict(pixels[:BATCH])  # trace
    started = time.perf_counter()
    for start in range(0, len(pixels), BATCH):
        predict(pixels[start:start + BATCH])["probabilities"].numpy()
    return len(pixels) / (time.perf_counter() - started)


def batch(model_dir: Path, data_dir: Path, source: str, workers: int) -> dict:
    from fmnist_kfp.batch.local_scorer import LocalBatchScorer
    from fmnist_kfp.scoring.scoring_job import ScoringJobSpec

    output = WORK / "batch_output"
    shutil.rmtree(output, ignore_errors=True)
    spec = ScoringJobSpec(name="fmnist-batch-bench", model_dir=str(model_dir),
                          data_dir=str(data_dir), output_dir=str(output), source=source,
                          num_shards=workers, batch_size=BATCH)
    summary = LocalBatchScorer(out=open(os.devnull, "w"), timeout_seconds=900).run(spec)
    return {"rows": summary["rows"], "errors": summary["errors"],
            "end_to_end": summary["rows"] / summary["job_seconds"],
            "scoring": summary["scoring_images_per_second"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    from fmnist_kfp.dataset.pipeline import load_arrays

    data_dir = ingested_dataset(args.data_source)
    model_dir = exported_model()
    images, _ = load_arrays(str(data_dir), "test")
    pngs = png_directory(images)
    samples: dict[str, list] = {"in_process": [], "workers_1": [], "workers_2": [],
                                "png_workers_2": []}
    for round_index in range(args.rounds):
        samples["in_process"].append(in_process(model_dir, images))
        samples["workers_1"].append(batch(model_dir, data_dir, "", 1))
        samples["workers_2"].append(batch(model_dir, data_dir, "", 2))
        samples["png_workers_2"].append(batch(model_dir, data_dir, str(pngs), 2))
        print(f"round {round_index + 1}: " + json.dumps(
            {k: v[-1] if isinstance(v[-1], float) else v[-1]["scoring"]
             for k, v in samples.items()}), flush=True)

    def median(name: str, key: str) -> float:
        return round(statistics.median(s[key] for s in samples[name]), 1)

    ceiling = round(statistics.median(samples["in_process"]), 1)
    result = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform(),
                    "python": sys.version.split()[0]},
        "images": int(len(images)),
        "batch_size": BATCH,
        "rounds": args.rounds,
        "in_process_images_per_second": ceiling,
    }
    for name in ("workers_1", "workers_2", "png_workers_2"):
        result[f"batch_prediction_{name}"] = {
            "end_to_end_images_per_second": median(name, "end_to_end"),
            "scoring_images_per_second": median(name, "scoring"),
            "scoring_vs_in_process": round(statistics.median(
                s["scoring"] / c for s, c in zip(samples[name], samples["in_process"],
                                                 strict=True)), 3),
            "end_to_end_vs_in_process": round(statistics.median(
                s["end_to_end"] / c for s, c in zip(samples[name], samples["in_process"],
                                                    strict=True)), 3),
            "error_rows": samples[name][-1]["errors"],
        }
    write_results("batch_prediction", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
