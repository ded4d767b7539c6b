"""The one image decoder: encoded bytes to the model's 28×28 pixels, for every way an image
arrives (V1 ``image_bytes``, V2 ``BYTES`` over REST or gRPC, batch prediction).

The model learnt from Fashion-MNIST, whose images were made from product photos by one
conversion (its README, Xiao et al. 2017): trim the edges close to the corner colour, resize the
longest side to 28, sharpen, pad the short side and centre, negate, 8-bit gray. What people send
is mostly the photo, so the decoder does that conversion's work:

1. **Limits before decoding.** Pillow reads only the header; the declared width, height and
   pixel count are checked against :class:`ImageLimits` before a pixel is allocated (a small
   file declaring 20000×20000 pixels is a 413, not an out-of-memory kill). PNG, JPEG, GIF, BMP,
   WebP and AVIF are read; HEIC is a 415 that says what to send instead.
2. **Orientation.** The EXIF Orientation tag is applied (phones store photos sideways).
3. **Luminance as the dataset was made**: ITU-R BT.601 luma of colour
   (:data:`fmnist_kfp.training.export.GRAY_WEIGHTS`), in float; 16-bit samples keep their high
   byte. Transparency shows the dataset's black (colour times alpha), unless the colour under
   the transparent pixels is light: a cut-out from a white backdrop, shown over white.
4. **Dataset-style images are left as they are**: light on a dark background (the corners'
   median), the object spanning the frame along one side and centred. They are resized exactly
   as ``tf.image.resize`` (bilinear, half-pixel centres) does, from only the 4×28×28 source
   pixels the result depends on: the same pixels, bit for bit, as before these rules and as the
   SavedModel's ``serving_default`` graph (what the TF Serving runtime runs) makes.
5. **Photos**: a light backdrop (the corners' median above mid-gray) is divided out through a
   surface fitted to the corners (a gradient, light falling off) and the image negated; a dark
   uneven one is subtracted. What stays fainter than a share of the object's peak fades to black
   (shadows, JPEG noise). The object's box (the dataset's trim, 5% of full intensity) is
   cropped, its longest side resized to 28 (area-averaged), the short side padded, the object
   centred.

The TF Serving runtime (``serving_default``) does steps 3-4 only: no EXIF orientation, no
backdrop, no centring; photos are served right by our runtime (``fmnist-predictor``).
"""


from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from kserve.errors import InvalidInput

from fmnist_kfp.dataset.official import IMAGE_SIZE
from fmnist_kfp.errors import FmnistError
from fmnist_kfp.training.export import GRAY_WEIGHTS

FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP", "AVIF")
# Leading bytes of those formats: anything else is refused before Pillow looks at it.
_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")
_AVIF_BRANDS = (b"avif", b"avis")
_HEIF_BRANDS = (b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1")
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096
DEFAULT_MAX_IMAGE_SIDE = 8192
# Images up to this many pixels decode in well under a millisecond: not worth a thread hop.
INLINE_DECODE_PIXELS = 256 * 256
_WEIGHTS = np.asarray(GRAY_WEIGHTS, np.float32)
# The photo rules (see the module docstring), in intensities 0–255 and shares of a side.
TRIM_LEVEL = 0.05 * 255  # the dataset's trim: within 5% of the corner colour is background
OBJECT_SHARE = 0.2  # ... and so is what is fainter than a tenth of the object's peak (shadows)
FLAT_BACKGROUND = 6.0  # a corner this dark is the dataset's black
FILL_SHARE = 0.85  # an object spanning this much of a side fills the frame, as in the dataset
# Fainter than this share of the peak fades to black (chosen on the validation split).
SHADOW_SHARE = 0.22
CENTRE_SLACK = 0.1  # ... if its centre is this close to the image's


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


class ImageTooLarge(FmnistError, InvalidInput):
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


def _iso_brand(data: bytes) -> bytes:
    """The major brand of an ISO base media file (AVIF, HEIC): ``....ftyp<brand>``."""
    return data[8:12] if data[4:8] == b"ftyp" else b""


class UnsupportedImageType(FmnistError, InvalidInput):
    """An image in a format the server does not decode: HTTP 415."""

    status_code = 415


def open_image(data: bytes, where: str, limits: ImageLimits) -> OpenedImage:
    """Reads the header of ``data`` and checks it; a 4xx naming ``where`` if it is refused."""
    brand = _iso_brand(data)
    if brand in _HEIF_BRANDS:
        raise UnsupportedImageType(
            f"{where}: HEIC/HEIF images (as iPhones save photos) cannot be decoded here; send "
            "JPEG, PNG, WebP or AVIF (iPhone: Settings > Camera > Formats > Most Compatible)")
    if not (data.startswith(_MAGIC) or _is_webp(data) or brand in _AVIF_BRANDS):
        raise InvalidInput(f"{where}: the bytes are not a PNG, JPEG, GIF, BMP or WebP image, "
                           "nor AVIF")
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


def _oriented(image):
    """The image as a camera meant it: the EXIF Orientation tag applied (phones store photos
    sideways with the tag; Pillow decodes the stored pixels). None when there is nothing to
    turn."""
    try:
        orientation = image.getexif().get(0x0112, 1)
    except Exception:  # a malformed EXIF block is no reason to refuse the image
        return None
    if orientation in (None, 1) or not 2 <= int(orientation) <= 8:
        return None
    from PIL import ImageOps

    return ImageOps.exif_transpose(image)


def _luminance(channels: np.ndarray) -> tuple[np.ndarray, bool]:
    """Float32 luma 0–255 [H, W], and whether the image is a cut-out from a light backdrop.

    Transparency shows the dataset's black background (colour times alpha), unless the colour
    kept under the fully transparent pixels is light: a photo whose white backdrop was made
    transparent, shown over white as the sender saw it."""
    count = channels.shape[-1]
    values = channels.astype(np.float32)
    gray = values[..., 0] if count < 3 else values[..., :3] @ _WEIGHTS
    if count not in (2, 4):
        return gray, False
    alpha = values[..., -1] / np.float32(255)
    clear = alpha < 0.03
    if clear.any() and float(np.median(gray[clear])) > 127.5:
        return gray * alpha + np.float32(255) * (1 - alpha), True
    return gray * alpha, False


def _corner_values(gray: np.ndarray) -> np.ndarray:
    """The colour in each corner (top-left, top-right, bottom-left, bottom-right): the median
    of a patch 1/25 of the short side wide. The dataset's conversion trimmed by the corners'
    colour; 99.7% of its images have all four corners black (≤ 6), 99.96% three of them."""
    height, width = gray.shape
    k = max(1, min(height, width) // 25)
    patches = (gray[:k, :k], gray[:k, -k:], gray[-k:, :k], gray[-k:, -k:])
    return np.array([float(np.median(patch)) for patch in patches], np.float32)


def _background(gray: np.ndarray, corners: np.ndarray) -> np.ndarray | None:
    """The background as a bilinear surface through the corners (a flat colour, a gradient, a
    light falling off), or None where at least three corners are the dataset's black. A corner
    far from the others (the garment reaching it) takes their mean instead."""
    if int(np.sum(corners <= FLAT_BACKGROUND)) >= 3:
        return None
    return _corner_surface(gray, corners)


def _corner_surface(gray: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """A bilinear surface through the four corners' colours (:func:`_corner_values`)."""
    typical = np.abs(corners - np.median(corners)) <= TRIM_LEVEL
    if not typical.all() and typical.any():
        corners = np.where(typical, corners, corners[typical].mean())
    height, width = gray.shape
    ys = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    xs = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    top = corners[0] + (corners[1] - corners[0]) * xs
    bottom = corners[2] + (corners[3] - corners[2]) * xs
    return top + (bottom - top) * ys


def _object_box(gray: np.ndarray, background: float = 0.0) -> tuple[int, int, int, int] | None:
    """Top, bottom, left, right (exclusive) of what stands out of a dark ``background`` level:
    the dataset's trim of the edges close to the corner colour (5% of full intensity)."""
    peak = float(gray.max())
    level = max(background + TRIM_LEVEL, OBJECT_SHARE * peak)
    if peak <= level:
        return None
    standing = gray > level
    rows = np.flatnonzero(standing.any(axis=1))
    columns = np.flatnonzero(standing.any(axis=0))
    return int(rows[0]), int(rows[-1]) + 1, int(columns[0]), int(columns[-1]) + 1


def _fills_frame(box: tuple[int, int, int, int] | None, height: int, width: int) -> bool:
    """A dataset-style frame: the object spans the image along one side (the dataset resized
    the longest side to 28) and sits in its middle."""
    if box is None:
        return True
    top, bottom, left, right = box
    spans = (bottom - top) >= FILL_SHARE * height or (right - left) >= FILL_SHARE * width
    centred = (abs((top + bottom) / 2 - height / 2) <= CENTRE_SLACK * height
               and abs((left + right) / 2 - width / 2) <= CENTRE_SLACK * width)
    return spans and centred


def _centred(gray: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """The dataset's conversion from the trimmed object on: the longest side resized to 28
    (area-averaged when shrinking), the short side padded, the object in the centre."""
    from PIL import Image

    top, bottom, left, right = box
    crop = np.ascontiguousarray(gray[top:bottom, left:right], dtype=np.float32)
    height, width = crop.shape
    scale = IMAGE_SIZE / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    method = Image.Resampling.BOX if scale < 1 else Image.Resampling.BILINEAR
    resized = np.asarray(Image.fromarray(crop, mode="F").resize(size, method), np.float32)
    canvas = np.zeros((IMAGE_SIZE, IMAGE_SIZE), np.float32)
    y, x = (IMAGE_SIZE - size[1]) // 2, (IMAGE_SIZE - size[0]) // 2
    canvas[y:y + size[1], x:x + size[0]] = resized
    return np.clip(canvas, 0, 255)


def _dataset_resize(channels: np.ndarray) -> np.ndarray:
    """``tf.image.resize`` to 28×28 (bilinear, half-pixel centres, no antialiasing) of the luma,
    computed, as the SavedModel graph does, from only the 4×28×28 source pixels the result
    depends on (in this order, so that the float32 results stay the same bit for bit)."""
    height, width = channels.shape[:2]
    top, bottom, y_lerp = _resize_taps(height)
    left, right, x_lerp = _resize_taps(width)
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


def to_model_pixels(opened: OpenedImage) -> np.ndarray:
    """Decodes an opened image to float32 [28, 28], intensities 0–255, as the dataset's own
    conversion would have made it (see the module's docstring)."""
    image = opened.image
    try:
        if image.size == (IMAGE_SIZE, IMAGE_SIZE) and image.mode == "L" \
                and "transparency" not in image.info:
            return np.asarray(image, dtype=np.float32)  # the dataset's own format
        turned = _oriented(image)
        channels = _channels(turned if turned is not None else image)
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise InvalidInput(f"{opened.where}: the image cannot be decoded ({error})") from None
    gray, cut_out = _luminance(channels)
    negated = False
    corners = _corner_values(gray)
    background = float(np.median(corners))
    if background > 127.5:
        # A garment photographed on light: the backdrop's light, uneven as lighting is
        # (a gradient, a shadow), divided out, then the dataset's negation.
        backdrop = np.maximum(_corner_surface(gray, corners), np.float32(1))
        gray = np.float32(255) - np.clip(gray / backdrop * np.float32(255), 0, 255)
        negated = True
    elif turned is None and not cut_out \
            and _fills_frame(_object_box(gray, background), *gray.shape):
        # Dataset-style (light on a dark background, filling the frame): exactly the pixels
        # the SavedModel's serving_default graph makes, as before.
        return _dataset_resize(channels)
    plane = None if negated else _background(gray, corners)
    if plane is not None:
        gray = np.clip(gray - plane, 0, 255)
    box = _object_box(gray)
    if box is None:
        return np.zeros((IMAGE_SIZE, IMAGE_SIZE), np.float32)
    if negated or plane is not None:
        # A photo's backdrop is never quite even (a shadow, JPEG noise): what is fainter than
        # the trim level above it fades to the dataset's black instead of staying grey.
        floor = max(TRIM_LEVEL, SHADOW_SHARE * float(gray.max()))
        gray = gray * np.clip((gray - floor / 2) / (floor / 2), 0, 1)
    return _centred(gray, box)


def decode_image(data: bytes, where: str, limits: ImageLimits | None = None) -> np.ndarray:
    """``open_image`` then ``to_model_pixels``: encoded bytes to float32 [28, 28]."""
    return to_model_pixels(open_image(data, where, limits or ImageLimits()))
