from kfp.dsl import Dataset, Output

from kfp_components.base import component


@component
def ingest_fashion_mnist(
    data_source: str,
    freshness_window: str,
    expected_sha256: dict,
    dataset: Output[Dataset],
):
    """Ingests Fashion-MNIST and writes it as sharded TFRecords for multi-worker tf.data.

    Verifies the sha256 of each official IDX file (TensorFlow Datasets verifies its own
    downloads) and fails with a clear message on a missing or corrupted file or no network.

    Args:
        data_source: ``tfds``; a directory or URI (``gs://``, ``s3://``, ``https://``) holding
            the four official IDX ``.gz`` files; or empty for ``$FASHION_MNIST_DIR``, else TFDS.
        freshness_window: The current freshness window (from ``freshness-window``); it is
            part of the cache key, so cached data expires with the window.
        expected_sha256: Digests per file name replacing the official ones, for IDX files you
            derived yourself; empty means the official release.
        dataset: TFRecord shards plus ``metadata.json`` (source, checksums, split sizes,
            per-class counts).
    """
    from fmnist.dataset.ingest import ingest

    metadata = ingest(data_source, dataset.path, expected_sha256=expected_sha256 or None)
    dataset.metadata.update(
        {
            "source": metadata["source"],
            "verification": metadata["verification"],
            "sha256": metadata["sha256"],
            "freshness_window": freshness_window,
            "format": metadata["format"],
            "ingested_at": metadata["ingested_at"],
            **{
                f"{split}_examples": info["num_examples"]
                for split, info in metadata["splits"].items()
            },
            **{
                f"{split}_class_counts": info["class_counts"]
                for split, info in metadata["splits"].items()
            },
        }
    )
