"""The ingestion step: the dataset written as TFRecord shards (train, validation, test), and the
``Dataset`` artifact's metadata (source, checksums, split sizes and class counts, how the
validation split was carved) that lineage and the UI show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmnist_kfp.dataset.ingest import ingest
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.settings.data import DataSettings


@dataclass(frozen=True)
class IngestedDataset:
    """What ingestion wrote, as its ``metadata.json`` says (``splits``: each split's
    ``num_examples`` and ``class_counts``; the validation split's ``rule`` too), and the
    freshness window it was written in."""

    source: str
    verification: Any
    sha256: dict[str, str]
    freshness_window: str
    format: str
    ingested_at: str
    splits: dict[str, dict[str, Any]]

    def artifact_metadata(self) -> dict[str, Any]:
        """The ``Dataset`` artifact's metadata: one flat key per split's size and counts."""
        return {
            "source": self.source,
            "verification": self.verification,
            "sha256": self.sha256,
            "freshness_window": self.freshness_window,
            "format": self.format,
            "ingested_at": self.ingested_at,
            "splits": list(self.splits),
            "validation_split": self.splits["validation"]["rule"],
            **{f"{split}_examples": info["num_examples"] for split, info in self.splits.items()},
            **{f"{split}_class_counts": info["class_counts"]
               for split, info in self.splits.items()},
        }

    def kfp_outputs(self) -> StepOutputs:
        return StepOutputs(metadata=self.artifact_metadata())


@reports_errors_briefly
def ingest_step(data_source: str, output_dir: str, *, freshness_window: str,
                expected_sha256: dict[str, str] | None = None,
                validation_examples: int = DataSettings().validation_examples
                ) -> IngestedDataset:
    """Ingests the dataset into ``output_dir``; returns what was written."""
    metadata = ingest(data_source, output_dir, expected_sha256=expected_sha256 or None,
                      validation_examples=validation_examples)
    return IngestedDataset(
        source=metadata["source"], verification=metadata["verification"],
        sha256=metadata["sha256"], freshness_window=freshness_window,
        format=metadata["format"], ingested_at=metadata["ingested_at"],
        splits=metadata["splits"])
