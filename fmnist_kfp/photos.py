"""Photo-style versions of real Fashion-MNIST images: the ways people actually send a picture
of a garment, made from the dataset's own images so that the true class is known. The selection
report shows the chosen model on a few (:mod:`fmnist_kfp.selection.photo_examples`); the tests and
the docs measure accuracy on each way.

The dataset's conversion (its README) made each 28×28 image from a product photo: trimmed,
longest side resized to 28, centred, intensities negated (the garment light on black). Each
variant here undoes part of that, as a camera or a shop would have it: the garment dark on a
white background, at photo sizes, off centre, small in a large frame, on a gradient or with a
shadow, stored sideways with an EXIF Orientation tag, cut out with transparency, in colour, as
JPEG, WebP or AVIF.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFilter

VARIANTS = (
    "png_28", "webp_112", "tinted_rgb_140", "white_jpeg_300", "off_centre_420x300",
    "exif_3", "exif_6", "exif_8", "cut_out_png", "small_in_large", "shadow", "gradient",
    "webp_photo", "avif_photo",
)
# The variants that are photos; the first three are the dataset's own images re-encoded.
PHOTO_VARIANTS = VARIANTS[3:]
# EXIF Orientation values and the rotation that stores a photo so that the tag undoes it.
_STORED = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90,
           8: Image.Transpose.ROTATE_270}


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _photo(pixels: np.ndarray, side: int) -> Image.Image:
    """The garment dark on white, ``side`` pixels square, smoothly upscaled."""
    return Image.fromarray(255 - pixels).resize((side, side), Image.Resampling.BICUBIC)


def _on_canvas(garment: Image.Image, size: tuple[int, int], at: tuple[int, int],
               background: np.ndarray | int = 255) -> Image.Image:
    canvas = np.broadcast_to(np.asarray(background, np.float32), (size[1], size[0])).copy()
    x, y = at
    patch = np.asarray(garment, np.float32)
    # The garment darkens what is behind it (multiply), as print on a backdrop would.
    region = canvas[y:y + patch.shape[0], x:x + patch.shape[1]]
    canvas[y:y + patch.shape[0], x:x + patch.shape[1]] = region * patch / 255
    return Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8))


def variant(pixels: np.ndarray, name: str, seed: int = 0) -> bytes:
    """``pixels`` (a dataset image, uint8 [28, 28]) sent the way ``name`` says."""
    rng = np.random.default_rng(seed)
    gray = Image.fromarray(pixels)
    if name == "png_28":
        return _encode(gray, "PNG")
    if name == "webp_112":
        return _encode(gray.resize((112, 112), Image.Resampling.BILINEAR), "WEBP", quality=90)
    if name == "tinted_rgb_140":
        big = np.asarray(gray.resize((140, 140), Image.Resampling.BILINEAR), np.float32)
        tint = np.array([1.0, 0.75, 0.55]) if seed % 2 else np.array([0.6, 0.85, 1.0])
        return _encode(Image.fromarray((big[..., None] * tint).astype(np.uint8)), "PNG")
    if name == "white_jpeg_300":
        return _encode(_photo(pixels, 300).convert("RGB"), "JPEG", quality=88)
    if name == "off_centre_420x300":
        x, y = int(rng.integers(0, 420 - 220)), int(rng.integers(0, 300 - 220))
        return _encode(_on_canvas(_photo(pixels, 220), (420, 300), (x, y)).convert("RGB"),
                       "JPEG", quality=88)
    if name.startswith("exif_"):
        orientation = int(name.split("_")[1])
        stored = _photo(pixels, 240).convert("RGB").transpose(_STORED[orientation])
        exif = Image.Exif()
        exif[0x0112] = orientation
        return _encode(stored, "JPEG", quality=88, exif=exif.tobytes())
    if name == "cut_out_png":
        photo = _photo(pixels, 200).convert("RGB")
        alpha = Image.fromarray(pixels).resize((200, 200), Image.Resampling.BICUBIC)
        alpha = alpha.point(lambda v: 255 if v > 12 else 0)
        photo.putalpha(alpha)
        return _encode(photo, "PNG")
    if name == "small_in_large":
        x, y = int(rng.integers(40, 400 - 100)), int(rng.integers(40, 400 - 100))
        return _encode(_on_canvas(_photo(pixels, 60), (400, 400), (x, y)).convert("RGB"),
                       "JPEG", quality=90)
    if name == "shadow":
        garment = _photo(pixels, 220)
        shadow = Image.fromarray(np.where(pixels > 12, 200, 255).astype(np.uint8)).resize(
            (220, 220), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(12))
        canvas = _on_canvas(shadow, (300, 300), (52, 52))
        canvas = _on_canvas(garment, (300, 300), (40, 40), np.asarray(canvas, np.float32))
        return _encode(canvas.convert("RGB"), "JPEG", quality=88)
    if name == "gradient":
        ys = np.linspace(255, 185, 300, dtype=np.float32)[:, None]
        xs = np.linspace(0, 20, 300, dtype=np.float32)[None, :]
        return _encode(_on_canvas(_photo(pixels, 240), (300, 300), (30, 30), ys - xs)
                       .convert("RGB"), "JPEG", quality=88)
    if name == "webp_photo":
        return _encode(_photo(pixels, 256).convert("RGB"), "WEBP", quality=85)
    if name == "avif_photo":
        return _encode(_photo(pixels, 256).convert("RGB"), "AVIF", quality=80)
    raise ValueError(f"unknown variant {name!r}; one of {VARIANTS}")
