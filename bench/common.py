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
    """The real dataset ingested once under bench/results/work, shared by the benchmarks.
    TensorFlow is imported here, the first time a benchmark needs it, without its start-up
    lines about a GPU the machine lacks."""
    from fmnist_kfp.training.quiet_start import import_tensorflow_quietly

    import_tensorflow_quietly()
    from fmnist_kfp.dataset.ingest import ingest

    data_dir = WORK / "dataset"
    metadata = data_dir / "metadata.json"
    # A copy ingested before the validation split existed is ingested again.
    if not metadata.exists() or "validation" not in json.loads(metadata.read_text())["splits"]:
        ingest(data_source, str(data_dir))
    return data_dir


HEADLINE_LINES = 25


def headline(result: dict, prefix: str = "", depth: int = 2) -> list[str]:
    """``key: value`` of the figures at the top of ``result`` (and one level down): what a
    person reads on the terminal; the JSON file holds the rest."""
    lines = []
    for key, value in result.items():
        if isinstance(value, dict) and depth > 1:
            lines += headline(value, f"{prefix}{key}.", depth - 1)
        elif not isinstance(value, (dict, list)):
            lines.append(f"{prefix}{key}: {value}")
    return lines


def write_results(name: str, result: dict, path: Path | None = None) -> Path:
    """Writes ``result`` to ``path`` (default ``bench/results/<name>.json``) and prints its
    headline figures."""
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    lines = headline(result)
    for line in lines[:HEADLINE_LINES]:
        print(f"  {line}")
    more = f" ({len(lines) - HEADLINE_LINES} more figures there)" if len(lines) > \
        HEADLINE_LINES else ""
    print(f"wrote {path}{more}")
    return path
