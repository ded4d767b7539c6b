"""The one image decoder of the model server: encoded bytes to the model's 28×28 pixels.

Every image a client sends goes through here, whatever the protocol (V1, V2 over REST or
gRPC), and comes out exactly as the SavedModel's ``serving_default`` graph (the one TF Serving
runs, :mod:`fmnist.training.export`) would make it, so the two paths agree:

1. **Limits before decoding.** Pillow reads only the header; the declared width, height and
   pixel count are checked against :class:`ImageLimits` before a pixel is allocated, so a small
   file declaring 20000×20000 pixels (a decompression bomb) is a 413, not a 500 or an
   out-of-memory kill.
2. **Decode** with Pillow: PNG (gray, RGB, palette, 16-bit, alpha), JPEG (gray, YCbCr, CMYK/YCCK,
   baseline or progressive), GIF (87a/89a; the first frame of an animation), BMP and WebP. JPEG
   is decoded with libjpeg's accurate integer IDCT, as the graph asks for.
3. **Grayscale the way the dataset was made**: Fashion-MNIST is 8-bit luma (step 6 of its
   conversion, Xiao et al. 2017); colour becomes ITU-R BT.601 luma
   (:data:`fmnist.training.export.GRAY_WEIGHTS`), computed in float. Transparency shows the
   background, which is black in Fashion-MNIST, so colour is multiplied by alpha. 16-bit samples
   keep their high byte, as TensorFlow's PNG decoder does.
4. **Resize** to 28×28 exactly as ``tf.image.resize`` (bilinear, half-pixel centres, no
   antialiasing) does, computing only the 4×28×28 source pixels the result depends on, so a
   large photo costs its decode and little more.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from kserve.errors import InvalidInput

from fmnist.dataset.official import IMAGE_SIZE
from fmnist.training.export import GRAY_WEIGHTS

FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")
# Leading bytes of those formats: anything else is refused before Pillow looks at it.
_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096
DEFAULT_MAX_IMAGE_SIDE = 8192
# Images up to this many pixels decode in well under a millisecond: not worth a thread hop.
INLINE_DECODE_PIXELS = 256 * 256
_WEIGHTS = np.asarray(GRAY_WEIGHTS, np.float32)


@dataclass(frozen=True)
class ImageLimits:
    """What a client may ask the server to decode (``--max_image_pixels``,
    ``--max_image_side``): checked on the declared size, before decoding."""

    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_side: int = DEFAULT_MAX_IMAGE_SIDE

    def __post_init__(self):
        if self.max_pixels < IMAGE_SIZE * IMAGE_SIZE or self.max_side < IMAGE_SIZE:
            raise ValueError(
                f"image limits must allow at least {IMAGE_SIZE}×{IMAGE_SIZE} pixels, got "
                f"max_pixels={self.max_pixels}, max_side={self.max_side}"
            )


class ImageTooLarge(InvalidInput):
    """An image whose declared size is over the limits: HTTP 413 (gRPC INVALID_ARGUMENT)."""

    status_code = 413


@dataclass
class OpenedImage:
    """An image whose header was read and checked; its pixels are not decoded yet."""

    image: Any  # PIL.Image.Image
    where: str

    @property
    def pixels(self) -> int:
        width, height = self.image.size
        return width * height


def _is_webp(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"


def open_image(data: bytes, where: str, limits: ImageLimits) -> OpenedImage:
    """Reads the header of ``data`` and checks it; a 4xx naming ``where`` if it is refused."""
    if not (data.startswith(_MAGIC) or _is_webp(data)):
        raise InvalidInput(f"{where}: the bytes are not a PNG, JPEG, GIF, BMP or WebP image")
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow's own bomb check warns (or raises, past twice its limit) on open; ours is
            # stricter and answers the client.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError as error:
        declared = re.search(r"\((\d+) pixels\)", str(error))
        raise ImageTooLarge(
            f"{where}: the image declares {declared[1] if declared else 'too many'} pixels; "
            f"at most {limits.max_pixels} are decoded (it is resized to "
            f"{IMAGE_SIZE}×{IMAGE_SIZE} anyway); send a smaller image"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise InvalidInput(f"{where}: the image cannot be read ({error})") from None
    width, height = image.size
    if width < 1 or height < 1:
        raise InvalidInput(f"{where}: the image is {width}×{height} pixels")
    if max(width, height) > limits.max_side or width * height > limits.max_pixels:
        raise ImageTooLarge(
            f"{where}: the image declares {width}×{height} pixels; at most "
            f"{limits.max_side} per side and {limits.max_pixels} in all are decoded (it is "
            f"resized to {IMAGE_SIZE}×{IMAGE_SIZE} anyway); send a smaller image or raise "
            "--max_image_pixels/--max_image_side"
        )
    return OpenedImage(image, where)


def _channels(image) -> np.ndarray:
    """The first frame as uint8 [H, W, C]: C = 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA — what
    TensorFlow's ``decode_image(channels=0)`` gives for the same file."""
    mode = image.mode
    # TensorFlow honours a palette's transparent entry (PNG tRNS, GIF) but not the single
    # colour key a gray or RGB PNG may declare; so does this.
    keyed = "transparency" in image.info and (mode == "P" or image.format == "GIF")
    if mode.startswith("I;16") or mode == "I":
        # 16-bit gray: the high byte, as libpng's strip_16 (TensorFlow's choice) keeps.
        wide = np.clip(np.asarray(image).astype(np.int64), 0, 65535)
        return (wide >> 8).astype(np.uint8)[..., None]
    if mode == "L" and not keyed:
        return np.asarray(image)[..., None]
    if mode in ("L", "LA", "La") and (keyed or mode != "L"):
        return np.asarray(image.convert("LA"))
    if mode == "1":
        return np.asarray(image.convert("L"))[..., None]
    if mode in ("RGBA", "RGBa", "PA") or keyed:
        return np.asarray(image.convert("RGBA"))
    if mode == "RGB":
        return np.asarray(image)
    return np.asarray(image.convert("RGB"))  # P, CMYK, YCbCr, RGBX, …


def _resize_taps(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of TensorFlow's bilinear resize (half-pixel centres) from
    ``size`` to IMAGE_SIZE: ``resize_bilinear_op.cc``'s ``compute_interpolation_weights``."""
    scale = np.float32(size / IMAGE_SIZE)
    position = (np.arange(IMAGE_SIZE, dtype=np.float32) + np.float32(0.5)) * scale \
        - np.float32(0.5)
    floor = np.floor(position)
    lower = np.maximum(floor, 0).astype(np.intp)
    upper = np.minimum(np.ceil(position), size - 1).astype(np.intp)
    return lower, upper, (position - floor).astype(np.float32)


def to_model_pixels(opened: OpenedImage) -> np.ndarray:
    """Decodes an opened image to float32 [28, 28], intensities 0–255."""
    image = opened.image
    try:
        if image.size == (IMAGE_SIZE, IMAGE_SIZE) and image.mode == "L" \
                and "transparency" not in image.info:
            return np.asarray(image, dtype=np.float32)  # the dataset's own format
        channels = _channels(image)
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise InvalidInput(f"{opened.where}: the image cannot be decoded ({error})") from None
    height, width = channels.shape[:2]
    top, bottom, y_lerp = _resize_taps(height)
    left, right, x_lerp = _resize_taps(width)
    # Only the rows and columns the resize reads: 56×56 pixels at most, whatever the image.
    rows = np.concatenate([top, bottom])
    columns = np.concatenate([left, right])
    sampled = channels[np.ix_(rows, columns)].astype(np.float32)
    count = sampled.shape[-1]
    gray = sampled[..., 0] if count < 3 else sampled[..., :3] @ _WEIGHTS
    if count in (2, 4):
        gray = gray * (sampled[..., -1] / np.float32(255))
    n = IMAGE_SIZE
    top_left, top_right = gray[:n, :n], gray[:n, n:]
    bottom_left, bottom_right = gray[n:, :n], gray[n:, n:]
    upper = top_left + (top_right - top_left) * x_lerp
    lower = bottom_left + (bottom_right - bottom_left) * x_lerp
    return (upper + (lower - upper) * y_lerp[:, None]).astype(np.float32)


def decode_image(data: bytes, where: str, limits: ImageLimits | None = None) -> np.ndarray:
    """``open_image`` then ``to_model_pixels``: encoded bytes to float32 [28, 28]."""
    return to_model_pixels(open_image(data, where, limits or ImageLimits()))
