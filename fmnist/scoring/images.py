"""Reading one input image the way the predictor does, or saying why it cannot be read.

The predictor (``serving/model_server/protocol.py``, ``check_image_bytes``) accepts PNG, JPEG,
GIF and BMP by their leading bytes, refuses images over 4096×4096 pixels, decodes a lossless
28×28 grayscale image (the dataset's own format) with Pillow into pixels, and hands anything
else to the SavedModel's ``serving_default`` graph, which decodes, converts to grayscale and
resizes it. The same rules here give batch prediction the served model's answers. This is a
minimal copy of those rules without KServe's error type; it also decodes every image in full,
so a truncated file is an error row here instead of failing the graph call of a whole batch.
"""

from __future__ import annotations

import io

import numpy as np

from fmnist.dataset.official import IMAGE_SIZE

PIXELS = "pixels"
ENCODED = "image_bytes"
_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")
MAX_IMAGE_PIXELS = 4096 * 4096
_LOSSLESS = ("PNG", "BMP")


class BadInput(ValueError):
    """One input cannot be scored; the message (the error row's) says why."""


def read_image(data: bytes) -> tuple[str, np.ndarray | bytes]:
    """``(PIXELS, float32 [28, 28])`` for a lossless 28×28 grayscale image, ``(ENCODED, data)``
    for any other readable image, or ``BadInput``."""
    if not data.startswith(_MAGIC):
        raise BadInput("not a PNG, JPEG, GIF or BMP image")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise BadInput(f"the image is {width}×{height}; at most {MAX_IMAGE_PIXELS} "
                               "pixels are read")
            image.load()  # the whole image: a truncated file fails here, on its own
            if (image.format in _LOSSLESS and image.mode == "L"
                    and image.size == (IMAGE_SIZE, IMAGE_SIZE)):
                return PIXELS, np.asarray(image, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise BadInput(f"the image cannot be read ({error})") from None
    return ENCODED, data


def pixels_from_raw(raw: bytes) -> np.ndarray:
    """The dataset's own record format: 784 raw uint8 intensities."""
    if len(raw) != IMAGE_SIZE * IMAGE_SIZE:
        raise BadInput(f"raw image of {len(raw)} bytes; expected {IMAGE_SIZE * IMAGE_SIZE} "
                       f"({IMAGE_SIZE}×{IMAGE_SIZE} uint8)")
    return np.frombuffer(raw, dtype=np.uint8).reshape(IMAGE_SIZE, IMAGE_SIZE).astype(np.float32)
