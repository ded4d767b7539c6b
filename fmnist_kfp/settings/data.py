"""Where the dataset comes from and how long an ingested copy is reused."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.durations import parse_duration
from fmnist_kfp.settings.schema import Settings, positive, raising, setting

DATA_DIR_ENV = "FASHION_MNIST_DIR"
TFDS_SOURCE = "tfds"


@dataclass
class DataSettings(Settings):
    WHAT = "data settings"

    data_source: str = setting(
        "", help=f"`{TFDS_SOURCE}`, a directory or URI (`gs://`, `s3://`, `https://`) holding the "
                 f"four official IDX `.gz` files, or empty for `${DATA_DIR_ENV}` (else TFDS).")
    freshness: str = setting(
        "24h", help="How long ingested data is reused from cache: `30m`, `24h`, `7d`, `P1D` "
                    "(windows aligned to the Unix epoch).",
        rules=[raising(parse_duration)])
    expected_sha256: dict = setting(
        factory=dict, help="Per-file sha256 digests replacing the official ones, for IDX files "
                           "you derived yourself; empty means the official release.")
    validation_examples: int = setting(
        5000, help="Training images ingestion sets aside as the `validation` split: the last "
                   "N/10 of each class in file order (fixed, class-stratified). Training "
                   "reports it every epoch, tuning and selection choose on it; only the chosen "
                   "model is evaluated on the test split.",
        rules=[positive])
