"""Shared storage for cluster jobs: the dataset staged where TFJob pods read it, and job
outputs copied back into the step's artifacts (local paths, mounts, gs://, s3://)."""

from __future__ import annotations

import hashlib


def copy_tree(source: str, destination: str, last: str = "") -> None:
    """Copies a directory with ``tf.io.gfile`` (local paths, mounts, gs://, s3://); the
    top-level file named ``last`` is copied after everything else (a completion marker)."""
    import tensorflow as tf

    deferred = None
    for directory, _, files in tf.io.gfile.walk(source):
        target = destination + directory[len(source.rstrip("/")):]
        tf.io.gfile.makedirs(target)
        for name in files:
            if name == last and target == destination:
                deferred = (f"{directory}/{name}", f"{target}/{name}")
                continue
            tf.io.gfile.copy(f"{directory}/{name}", f"{target}/{name}", overwrite=True)
    if deferred:
        tf.io.gfile.copy(*deferred, overwrite=True)


def stage_dataset(data_dir: str, shared_root: str) -> str:
    """Copies the dataset to shared storage under a name from its checksums; reuses a copy."""
    import tensorflow as tf

    from fmnist.dataset.records import METADATA_FILE, read_metadata

    metadata = read_metadata(data_dir)
    key = hashlib.sha256(
        repr(sorted(metadata.get("sha256", {}).items())).encode()
        + metadata.get("ingested_at", "").encode()
    ).hexdigest()[:16]
    target = f"{shared_root}/{key}"
    if not tf.io.gfile.exists(f"{target}/{METADATA_FILE}"):  # written last: a whole copy
        copy_tree(data_dir, target, last=METADATA_FILE)
    return target
