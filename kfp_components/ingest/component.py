from kfp.dsl import Dataset, Output

from fmnist_kfp.kfp_components.base import component


@component
def ingest_fashion_mnist(
    dataset: Output[Dataset],
    data_source: str = "tfds",
    freshness_window: str = "",
    expected_sha256: dict = {},  # noqa: B006 - KFP reads the default from here
    validation_examples: int = 5000,
):
    """Ingests Fashion-MNIST and writes it as sharded TFRecords for multi-worker tf.data.

    Verifies the sha256 of each official IDX file (TensorFlow Datasets verifies its own
    downloads) and fails with a clear message on a missing or corrupted file or no network.

    Args:
        data_source: `tfds`, a directory or URI (`gs://`, `s3://`, `https://`) holding the four
            official IDX `.gz` files, or empty for `$FASHION_MNIST_DIR` (else TFDS).
        freshness_window: The current freshness window (from ``freshness-window``); it is
            part of the cache key, so cached data expires with the window (empty: the cache
            entry never expires).
        expected_sha256: Per-file sha256 digests replacing the official ones, for IDX files you
            derived yourself; empty means the official release.
        validation_examples: Training images ingestion sets aside as the `validation` split: the
            last N/10 of each class in file order (fixed, class-stratified). Training reports it
            every epoch, tuning and selection choose on it; only the chosen model is evaluated on
            the test split.
        dataset: TFRecord shards of the train, validation and test splits plus
            ``metadata.json`` (source, checksums, split sizes, per-class counts, how the
            validation split was carved).
    """
    from fmnist_kfp.kfp_components.ingest.step import ingest_step
    from fmnist_kfp.kfp_components.outputs import publish
    from fmnist_kfp.lineage import add_lineage

    ingested = ingest_step(data_source, dataset.path, freshness_window=freshness_window,
                           expected_sha256=expected_sha256,
                           validation_examples=validation_examples)
    publish(ingested.kfp_outputs(), artifact=dataset)
    add_lineage(dataset, "ingest", "ingest_fashion_mnist", inputs={}, parameters={
        "source": dataset.metadata["source"], "idx_sha256": dataset.metadata["sha256"],
        "freshness_window": freshness_window, "validation_examples": validation_examples})
