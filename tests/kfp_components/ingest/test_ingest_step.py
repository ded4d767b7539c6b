"""The ingestion step's ``Dataset`` metadata, what lineage and the UI show: the source and its
checksums, the freshness window it was ingested in, and each split's size and class counts
(the ingestion itself: tests/fmnist_kfp/dataset/test_ingest.py)."""

from __future__ import annotations

from fmnist_kfp.dataset.official import CLASS_NAMES
from fmnist_kfp.kfp_components.ingest.step import ingest_step


def test_the_metadata_names_the_source_window_and_every_split(synthetic_idx, tmp_path):
    directory, checksums = synthetic_idx
    metadata = ingest_step(str(directory), str(tmp_path / "out"), freshness_window="2026-12-02",
                           expected_sha256=checksums,
                           validation_examples=200).kfp_outputs().metadata
    assert metadata["freshness_window"] == "2026-12-02"
    assert metadata["sha256"] == checksums
    assert metadata["splits"] == ["train", "validation", "test"]
    assert (metadata["train_examples"], metadata["validation_examples"],
            metadata["test_examples"]) == (1800, 200, 500)
    for split in metadata["splits"]:
        counts = metadata[f"{split}_class_counts"]
        assert list(counts) == list(CLASS_NAMES)
        assert sum(counts.values()) == metadata[f"{split}_examples"]
    assert metadata["validation_split"].startswith("the last n/10 images of each class")
