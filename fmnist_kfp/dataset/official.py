"""Facts about the official Fashion-MNIST release (Zalando Research, MIT licence)."""

from __future__ import annotations

from dataclasses import dataclass

CLASS_NAMES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
NUM_CLASSES = len(CLASS_NAMES)
IMAGE_SIZE = 28


# Where the release is downloaded from: Zalando's S3 bucket, as TensorFlow Datasets registers it for
# ``fashion_mnist`` (url_checksums/fashion_mnist.txt, with the sha256 below; the data source
# "tfds" downloads from there, and tests/test_shared_files.py holds the two together). Its website
# endpoint speaks plain HTTP only: the sha256 pins are what make a download trustworthy.
OFFICIAL_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"


@dataclass(frozen=True)
class OfficialFile:
    """One of the four gzip-compressed IDX files of the official release."""

    name: str
    split: str  # "train" or "test"
    kind: str  # "images" or "labels"
    sha256: str
    num_examples: int


OFFICIAL_FILES: tuple[OfficialFile, ...] = (
    OfficialFile(
        "train-images-idx3-ubyte.gz",
        "train",
        "images",
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        60_000,
    ),
    OfficialFile(
        "train-labels-idx1-ubyte.gz",
        "train",
        "labels",
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        60_000,
    ),
    OfficialFile(
        "t10k-images-idx3-ubyte.gz",
        "test",
        "images",
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        10_000,
    ),
    OfficialFile(
        "t10k-labels-idx1-ubyte.gz",
        "test",
        "labels",
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        10_000,
    ),
)
SPLITS = ("train", "test")
