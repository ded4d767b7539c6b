"""The ingestion step: the dataset written as TFRecord shards (train, validation, test), and the
``Dataset`` artifact's metadata (source, checksums, split sizes and class counts, how the
validation split was carved) that lineage and the UI show."""

from __future__ import annotations

from typing import Any

from fmnist_kfp.dataset.ingest import ingest
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.settings.data import DataSettings


@reports_errors_briefly
def ingest_step(data_source: str, output_dir: str, *, freshness_window: str,
                expected_sha256: dict[str, str] | None = None,
                validation_examples: int = DataSettings().validation_examples) -> dict[str, Any]:
    """Ingests the dataset into ``output_dir``; returns the artifact metadata."""
    metadata = ingest(data_source, output_dir, expected_sha256=expected_sha256 or None,
                      validation_examples=validation_examples)
    splits = metadata["splits"]
    return {
        "source": metadata["source"],
        "verification": metadata["verification"],
        "sha256": metadata["sha256"],
        "freshness_window": freshness_window,
        "format": metadata["format"],
        "ingested_at": metadata["ingested_at"],
        "splits": list(splits),
        "validation_split": splits["validation"]["rule"],
        **{f"{split}_examples": info["num_examples"] for split, info in splits.items()},
        **{f"{split}_class_counts": info["class_counts"] for split, info in splits.items()},
    }
