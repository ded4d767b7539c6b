"""One batch prediction worker: scores its shard of the source with the exported model.

Run as ``python -m fmnist_kfp.scoring.worker --model-dir M --output-dir O --num-shards N
[--shard-index I] [--source S] [--data-dir D]`` — a local worker process, or a pod of an Indexed
Job, where the shard comes from ``JOB_COMPLETION_INDEX``. It writes
``predictions-<i>-of-<n>.jsonl`` (one row per input: ``id``, ``class``, ``class_name``,
``probabilities``, and ``label`` when known; an input that cannot be read is a row with ``id``
and ``error`` instead) and ``shards/<i>-of-<n>.json`` (its counts), both written under a
temporary name and renamed, so a shard's files exist only once it is complete.

Every input becomes 28×28 pixels first — records of the ingested format as they are, image
files through the model server's decoding path, which gives the pixels the SavedModel's
``serving_default`` graph would — and is scored through ``serving_pixels``, batch by batch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from fmnist_kfp.scoring.image_reader import BadInput, pixels_from_raw, read_image
from fmnist_kfp.scoring.inputs import Item, list_source, shard_items
from fmnist_kfp.settings.platform import use_tensorflow_env

COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in Indexed Job pods
SHARDS_DIR = "shards"
BATCH_SIZE = 256
_DIGITS = 6  # probabilities to 6 decimals: exact enough, a third of the bytes


def part_name(shard: int, num_shards: int) -> str:
    return f"predictions-{shard:05d}-of-{num_shards:05d}.jsonl"


def shard_summary_name(shard: int, num_shards: int) -> str:
    return f"{SHARDS_DIR}/{shard:05d}-of-{num_shards:05d}.json"


def saved_model_dir(model_dir: str) -> str:
    """The SavedModel of a model artifact: ``<model>/1`` (the training layout) or the
    directory itself."""
    import tensorflow as tf

    from fmnist_kfp.training.export import SAVED_MODEL_VERSION

    versioned = f"{model_dir.rstrip('/')}/{SAVED_MODEL_VERSION}"
    if tf.io.gfile.exists(f"{versioned}/saved_model.pb"):
        return versioned
    if tf.io.gfile.exists(f"{model_dir.rstrip('/')}/saved_model.pb"):
        return model_dir
    raise FileNotFoundError(f"no SavedModel in {model_dir} (expected {versioned}/saved_model.pb)")


class Scorer:
    """The exported model's ``serving_pixels`` signature, batch by batch."""

    def __init__(self, model_dir: str):
        import tensorflow as tf

        from fmnist_kfp.training.export import PIXELS_SIGNATURE

        loaded = tf.saved_model.load(saved_model_dir(model_dir))
        self._keep = loaded  # the signature needs its object alive
        self._pixels = loaded.signatures[PIXELS_SIGNATURE]

    def pixels(self, batch: np.ndarray) -> np.ndarray:
        import tensorflow as tf

        return self._pixels(pixels=tf.constant(batch, tf.float32))["probabilities"].numpy()


def _row(item: Item, probabilities: np.ndarray) -> dict[str, Any]:
    from fmnist_kfp.dataset.official import CLASS_NAMES

    index = int(np.argmax(probabilities))
    row = {"id": item.id, "class": index, "class_name": CLASS_NAMES[index],
           "probabilities": [round(float(p), _DIGITS) for p in probabilities]}
    if item.label is not None:
        row["label"] = item.label
    return row


def score_batch(scorer: Scorer, items: list[Item]) -> list[dict[str, Any]]:
    """One row per item, in order; unreadable items become error rows."""
    rows: list[dict[str, Any] | None] = [None] * len(items)
    pixels: list[tuple[int, np.ndarray]] = []
    for position, item in enumerate(items):
        if item.error:
            rows[position] = {"id": item.id, "error": item.error}
            continue
        try:
            read = pixels_from_raw if item.raw else read_image
            pixels.append((position, read(item.data or b"")))
        except BadInput as error:
            rows[position] = {"id": item.id, "error": str(error)}
    if pixels:
        probabilities = scorer.pixels(np.stack([array for _, array in pixels]))
        for (position, _), values in zip(pixels, probabilities, strict=True):
            rows[position] = _row(items[position], values)
    return [row for row in rows if row is not None]


def _write_atomically(path: str, text: str) -> None:
    import tensorflow as tf

    temporary = f"{path}.tmp"
    with tf.io.gfile.GFile(temporary, "w") as handle:
        handle.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def score_shard(*, model_dir: str, source: str, data_dir: str, output_dir: str, shard: int,
                num_shards: int, batch_size: int = BATCH_SIZE) -> dict[str, Any]:
    """Scores shard ``shard`` of ``num_shards``; writes its rows and counts; returns the
    counts."""
    import tensorflow as tf

    started = time.perf_counter()
    listed = list_source(source, data_dir)
    scorer = Scorer(model_dir)
    loaded = time.perf_counter()
    counts = {"rows": 0, "predicted": 0, "errors": 0, "labelled": 0, "correct": 0}
    lines: list[str] = []
    batch: list[Item] = []

    def flush() -> None:
        for row in score_batch(scorer, batch):
            counts["rows"] += 1
            if "error" in row:
                counts["errors"] += 1
            else:
                counts["predicted"] += 1
                if "label" in row:
                    counts["labelled"] += 1
                    counts["correct"] += int(row["label"] == row["class"])
            lines.append(json.dumps(row))
        batch.clear()

    for item in shard_items(listed, shard, num_shards):
        batch.append(item)
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    finished = time.perf_counter()
    tf.io.gfile.makedirs(f"{output_dir}/{SHARDS_DIR}")
    _write_atomically(f"{output_dir}/{part_name(shard, num_shards)}",
                      "".join(line + "\n" for line in lines))
    summary = {"shard": shard, "num_shards": num_shards, **counts,
               "load_seconds": round(loaded - started, 3),
               "score_seconds": round(finished - loaded, 3)}
    _write_atomically(f"{output_dir}/{shard_summary_name(shard, num_shards)}",
                      json.dumps(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    use_tensorflow_env()
    parser = argparse.ArgumentParser(prog="python -m fmnist_kfp.scoring.worker",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--num-shards", type=int, required=True)
    parser.add_argument("--shard-index", type=int, default=None,
                        help=f"default ${COMPLETION_INDEX_ENV} (Indexed Job pods)")
    parser.add_argument("--source", default="", help="default: the dataset's test split")
    parser.add_argument("--data-dir", default="", help="the ingested dataset")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    args = parser.parse_args(argv)
    shard = args.shard_index
    if shard is None:
        if not os.environ.get(COMPLETION_INDEX_ENV, "").isdigit():
            parser.error(f"give --shard-index or set {COMPLETION_INDEX_ENV}")
        shard = int(os.environ[COMPLETION_INDEX_ENV])
    summary = score_shard(model_dir=args.model_dir, source=args.source, data_dir=args.data_dir,
                          output_dir=args.output_dir, shard=shard, num_shards=args.num_shards,
                          batch_size=args.batch_size)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
