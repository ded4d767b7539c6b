"""Where the dataset comes from and how long an ingested copy is reused."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.durations import parse_duration
from fmnist_kfp.settings.schema import Settings, positive, raising, setting

DATA_DIR_ENV = "FASHION_MNIST_DIR"
TFDS_SOURCE = "tfds"
# The official training files' images of each class (fmnist_kfp/dataset/official.py: 60,000
# images, 10 classes of 6,000; tests/fmnist_kfp/settings/test_settings.py holds the two
# together): what a validation split of the official release can take, keeping one to train on.
OFFICIAL_TRAIN_IMAGES_PER_CLASS = 6000


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

    def cross_problems(self) -> list[str]:
        """A validation split the official training files cannot give (checked before any
        work; derived files, with ``expected_sha256``, are checked at ingestion)."""
        most = (OFFICIAL_TRAIN_IMAGES_PER_CLASS - 1) * 10
        if not self.expected_sha256 and self.validation_examples > most:
            return [f"validation_examples={self.validation_examples} is more than the official "
                    f"training files can set aside ({OFFICIAL_TRAIN_IMAGES_PER_CLASS} images of "
                    f"each of 10 classes, one of each kept to train on): give at most {most}"]
        return []
