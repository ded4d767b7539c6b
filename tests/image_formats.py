"""Real images in every format and colour model the decoder and the model server accept, made
from dataset pixels with Pillow: the corpus the image decoder's tests (tests/fmnist_kfp/
test_images.py) and the model server's (tests/serving/model_server/) send."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def encode(image: Image.Image, image_format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, **options)
    return buffer.getvalue()


def format_corpus(pixels: np.ndarray, colour: bool = False) -> dict[str, bytes]:
    """One 28×28 image in every format and colour model the server accepts. Gray pixels stay
    the same pixels in every lossless variant; ``colour`` tints them (for the decoder test)."""
    gray = Image.fromarray(pixels)
    if colour:
        rgb = Image.merge("RGB", [gray, gray.point(lambda v: v // 2),
                                  gray.point(lambda v: 255 - v)])
    else:
        rgb = gray.convert("RGB")
    alpha = Image.fromarray(np.where(pixels > 20, 255, 96).astype(np.uint8))
    rgba = rgb.copy()
    rgba.putalpha(alpha if colour else Image.new("L", gray.size, 255))
    gray_alpha = gray.convert("LA")
    gray_alpha.putalpha(alpha if colour else Image.new("L", gray.size, 255))
    palette = rgb.quantize(256) if colour else gray.convert("P")
    inverse = Image.fromarray(255 - pixels)
    corpus = {
        "png_gray": encode(gray, "PNG"),
        "png_rgb": encode(rgb, "PNG"),
        "png_palette": encode(palette, "PNG"),
        "png_palette_transparent": encode(gray.convert("P"), "PNG", transparency=0),
        "png_16bit": encode(Image.fromarray(pixels.astype(np.uint16) * 257), "PNG"),
        "png_gray_alpha": encode(gray_alpha, "PNG"),
        "png_rgba": encode(rgba, "PNG"),
        "png_interlaced_84px": encode(rgb.resize((84, 84), Image.NEAREST), "PNG",
                                      interlace=1),
        "jpeg_gray": encode(gray, "JPEG", quality=95),
        "jpeg_rgb": encode(rgb, "JPEG", quality=95),
        "jpeg_cmyk": encode(rgb.convert("CMYK"), "JPEG", quality=95),
        "jpeg_progressive": encode(rgb, "JPEG", quality=95, progressive=True),
        "jpeg_300x217": encode(rgb.resize((300, 217), Image.LANCZOS), "JPEG", quality=90),
        "gif87a": encode(gray, "GIF"),
        "gif89a_transparent": encode(gray.convert("P"), "GIF", transparency=0),
        "gif89a_animated": encode(gray, "GIF", save_all=True, append_images=[inverse],
                                  duration=100, loop=0),
        "bmp_gray": encode(gray, "BMP"),
        "bmp_rgb": encode(rgb, "BMP"),
        "bmp_palette": encode(palette, "BMP"),
        "webp_lossless": encode(rgb, "WEBP", lossless=True),
        "webp_lossy": encode(rgb, "WEBP", quality=90),
        "webp_alpha": encode(rgba, "WEBP", lossless=True),
    }
    assert corpus["gif87a"].startswith(b"GIF87a")
    assert corpus["gif89a_transparent"].startswith(b"GIF89a")
    assert Image.open(io.BytesIO(corpus["jpeg_cmyk"])).mode == "CMYK"
    assert Image.open(io.BytesIO(corpus["png_16bit"])).mode.startswith("I")
    assert getattr(Image.open(io.BytesIO(corpus["gif89a_animated"])), "n_frames", 1) == 2
    return corpus


# Variants whose pixels are exactly the source pixels (gray, nothing lossy, nothing resized).
LOSSLESS = {"png_gray", "png_rgb", "png_palette", "png_palette_transparent", "png_16bit",
            "png_gray_alpha", "png_rgba", "gif87a", "gif89a_transparent", "gif89a_animated",
            "bmp_gray", "bmp_rgb", "bmp_palette", "webp_lossless", "webp_alpha"}
# TensorFlow's BMP decoder reads an 8-bit BMP's palette indices as gray levels (README).
GRAPH_CANNOT_READ = {"bmp_palette"}
