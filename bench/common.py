"""What the benchmarks share: where results go and the real dataset they all need."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

RESULTS = Path("bench/results")
WORK = RESULTS / "work"


def add_data_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-source", default=os.environ.get("FASHION_MNIST_DIR", ""),
                        help="the four official IDX files (default $FASHION_MNIST_DIR)")


def data_source_missing(args: argparse.Namespace) -> bool:
    """True (after saying what to do) when no real dataset was given."""
    if args.data_source:
        return False
    print("error: set FASHION_MNIST_DIR (or --data-source) to the real Fashion-MNIST",
          file=sys.stderr)
    return True


def ingested_dataset(data_source: str) -> Path:
    """The real dataset ingested once under bench/results/work, shared by the benchmarks."""
    from fmnist_kfp.dataset.ingest import ingest

    data_dir = WORK / "dataset"
    metadata = data_dir / "metadata.json"
    # A copy ingested before the validation split existed is ingested again.
    if not metadata.exists() or "validation" not in json.loads(metadata.read_text())["splits"]:
        ingest(data_source, str(data_dir))
    return data_dir


def write_results(name: str, result: dict) -> Path:
    """Prints ``result`` and writes it to ``bench/results/<name>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return path
