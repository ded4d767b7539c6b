"""Reading one input image exactly as the predictor does, or saying why it cannot be read.

Batch prediction decodes with the model server's one decoding path
(:mod:`fmnist_kfp.images`: every PNG, JPEG, GIF, BMP and WebP the predictor accepts,
the same grayscale conversion and resize as the SavedModel's ``serving_default`` graph, the same
size limits), so a file scored here gets the answer the served model gives for it. Every image
is decoded in full, so a truncated file is an error row of its own.
"""

from __future__ import annotations

import numpy as np
from kserve.errors import InvalidInput

from fmnist_kfp.dataset.official import IMAGE_SIZE
from fmnist_kfp.errors import FmnistError
from fmnist_kfp.images import ImageLimits, decode_image

_LIMITS = ImageLimits()


class BadInput(FmnistError, ValueError):
    """One input cannot be scored; the message (the error row's) says why."""


def read_image(data: bytes) -> np.ndarray:
    """float32 [28, 28] pixel intensities 0-255, or ``BadInput`` naming the problem."""
    try:
        return decode_image(data, "the input", _LIMITS)
    except InvalidInput as error:
        raise BadInput(str(error.reason).removeprefix("the input: ")) from None


def pixels_from_raw(raw: bytes) -> np.ndarray:
    """The dataset's own record format: 784 raw uint8 intensities."""
    if len(raw) != IMAGE_SIZE * IMAGE_SIZE:
        raise BadInput(f"raw image of {len(raw)} bytes; expected {IMAGE_SIZE * IMAGE_SIZE} "
                       f"({IMAGE_SIZE}×{IMAGE_SIZE} uint8)")
    return np.frombuffer(raw, dtype=np.uint8).reshape(IMAGE_SIZE, IMAGE_SIZE).astype(np.float32)
