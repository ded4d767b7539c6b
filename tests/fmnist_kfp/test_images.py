"""The one image decoder (``fmnist_kfp.images``) that batch prediction and the model server
share: dataset-style images keep their pixels exactly, in every format and colour model, and
agree with the exported SavedModel's own decoding; photo-style images (issue 22: any
orientation, light backgrounds, any aspect ratio, colour, cut-outs) are brought to the dataset's
conversion (its README: trim the edges close to the corner colour, longest side to 28, pad and
centre, negate, 8-bit gray). Served end to end in tests/serving/model_server/test_photos.py."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fmnist_kfp.images import (
    ImageLimits,
    UnsupportedImageType,
    _channels,
    _resize_taps,
    decode_image,
    open_image,
)
from fmnist_kfp.photos import PHOTO_VARIANTS, variant
from fmnist_kfp.serving.model_server.protocol import from_unit_scale
from tests.image_formats import GRAPH_CANNOT_READ, encode, format_corpus

PHOTOS = list(PHOTO_VARIANTS)


@pytest.fixture(scope="module")
def real_test_set(real_data_dir):
    from fmnist_kfp.dataset.sources import load

    split = load(str(real_data_dir)).splits["test"]
    return split.images[:100], split.labels[:100]


def _decoded_before(data: bytes) -> np.ndarray:
    """The decoder as it was before the photo rules (commit 8759b67), the oracle of
    bit-identity: luma of the first frame times alpha, resized as ``tf.image.resize``."""
    image = open_image(data, "x", ImageLimits()).image
    from fmnist_kfp.dataset.official import IMAGE_SIZE
    from fmnist_kfp.images import _WEIGHTS

    if image.size == (IMAGE_SIZE, IMAGE_SIZE) and image.mode == "L" \
            and "transparency" not in image.info:
        return np.asarray(image, dtype=np.float32)
    channels = _channels(image)
    height, width = channels.shape[:2]
    top, bottom, y_lerp = _resize_taps(height)
    left, right, x_lerp = _resize_taps(width)
    sampled = channels[np.ix_(np.concatenate([top, bottom]),
                              np.concatenate([left, right]))].astype(np.float32)
    count = sampled.shape[-1]
    gray = sampled[..., 0] if count < 3 else sampled[..., :3] @ _WEIGHTS
    if count in (2, 4):
        gray = gray * (sampled[..., -1] / np.float32(255))
    n = IMAGE_SIZE
    upper = gray[:n, :n] + (gray[:n, n:] - gray[:n, :n]) * x_lerp
    lower = gray[n:, :n] + (gray[n:, n:] - gray[n:, :n]) * x_lerp
    return (upper + (lower - upper) * y_lerp[:, None]).astype(np.float32)


def test_dataset_style_images_decode_exactly_as_before(real_test_set):
    """Every format and colour model of real test images as the dataset has them (garment light
    on black, filling the frame): the same float32 pixels, bit for bit, as before."""
    images, _ = real_test_set
    for pixels in images[:25]:
        for colour in (False, True):
            for name, data in format_corpus(pixels, colour=colour).items():
                assert np.array_equal(decode_image(data, name), _decoded_before(data)), name
        for side in (56, 112):
            data = encode(Image.fromarray(pixels).resize((side, side), Image.BILINEAR), "PNG")
            assert np.array_equal(decode_image(data, "x"), _decoded_before(data))
        assert np.array_equal(decode_image(encode(Image.fromarray(pixels), "PNG"), "x"),
                              pixels.astype(np.float32))


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.reshape(-1), b.reshape(-1).astype(np.float64))[0, 1])


@pytest.mark.parametrize("name", PHOTOS)
def test_a_photo_comes_out_as_the_dataset_image_it_was_made_from(real_test_set, name):
    """Model-free: the pixels the model gets from each photo-style variant look like the
    dataset image (correlation), where the decoder before the photo rules gave a negative or
    unrelated picture."""
    images, _ = real_test_set
    now, before = [], []
    for index, pixels in enumerate(images[:40]):
        data = variant(pixels, name, seed=index)
        now.append(_correlation(decode_image(data, name), pixels))
        if name != "avif_photo":
            before.append(_correlation(_decoded_before(data), pixels))
    assert np.median(now) >= 0.8, (name, np.median(now))  # measured 0.85-0.88
    if before:
        assert np.median(before) < 0.5, (name, np.median(before))


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_the_exif_orientation_is_applied(real_test_set, orientation):
    images, _ = real_test_set
    pixels = images[0]
    upright = decode_image(variant(pixels, "white_jpeg_300"), "upright")
    turned = decode_image(variant(pixels, f"exif_{orientation}"), "turned")
    assert _correlation(turned, upright) > 0.97


def test_heic_is_refused_with_415_and_avif_is_read(real_test_set):
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64)
    with pytest.raises(UnsupportedImageType) as refused:
        open_image(heic, "image_bytes[0]", ImageLimits())
    assert refused.value.status_code == 415
    assert "HEIC/HEIF" in refused.value.reason and "JPEG, PNG, WebP or AVIF" in \
        refused.value.reason
    images, _ = real_test_set
    decoded = decode_image(variant(images[1], "avif_photo"), "avif")
    same_as_webp = decode_image(variant(images[1], "webp_photo"), "webp")
    assert decoded.shape == (28, 28) and _correlation(decoded, same_as_webp) > 0.97


def test_pixels_scaled_to_unit_are_read_as_a_unit_image(real_test_set):
    images, _ = real_test_set
    pixels = images[2].astype(np.float32)
    np.testing.assert_allclose(from_unit_scale(pixels / 255), pixels, atol=1e-3)
    assert from_unit_scale(pixels) is pixels  # 0–255: untouched
    binary = (pixels > 100).astype(np.float32)
    assert from_unit_scale(binary) is binary  # only 0s and 1s: as sent


def _graph_pixels(data: bytes) -> np.ndarray:
    """What the SavedModel's serving_default makes of the bytes, before the model."""
    import tensorflow as tf

    from fmnist_kfp.training.export import decode_to_gray

    gray = decode_to_gray(tf.constant(data))[..., tf.newaxis]
    return tf.image.resize(gray, [28, 28])[..., 0].numpy()


def test_the_fast_path_decodes_every_format_as_the_savedmodel_graph_does(real_test_set,
                                                                        exported_model):
    """Colour, alpha, palette, 16-bit, CMYK, animation, other sizes: for dataset-style images
    (real test images: light on black, filling the frame) the Python decoder and the exported
    ``serving_default`` (what TF Serving runs) give the same pixels and the same
    probabilities. Photo-style images get the photo rules in Python only (test_photos.py)."""
    import tensorflow as tf

    images, _ = real_test_set

    from fmnist_kfp.images import decode_image
    from fmnist_kfp.serving.model_server.predictor import resolve_saved_model_dir

    signatures = tf.saved_model.load(resolve_saved_model_dir(str(exported_model))).signatures
    for pixels in images[:4]:
        corpus = format_corpus(pixels, colour=True)
        decoded = {name: decode_image(data, name) for name, data in corpus.items()}
        for name, data in corpus.items():
            if name in GRAPH_CANNOT_READ:
                continue
            np.testing.assert_allclose(decoded[name], _graph_pixels(data), atol=1e-3,
                                       err_msg=name)
        readable = [name for name in corpus if name not in GRAPH_CANNOT_READ]
        by_graph = signatures["serving_default"](
            image_bytes=tf.constant([corpus[name] for name in readable]))["probabilities"]
        by_fast_path = signatures["serving_pixels"](
            pixels=tf.constant(np.stack([decoded[name] for name in readable])))["probabilities"]
        np.testing.assert_allclose(by_fast_path.numpy(), by_graph.numpy(), atol=1e-5)
        # The palette BMP: right in Python, where TensorFlow reads indices as gray levels.
        np.testing.assert_allclose(decoded["bmp_palette"], decoded["png_palette"], atol=1e-3)
    # Colour becomes BT.601 luma, transparency shows the black background.
    red = encode(Image.new("RGBA", (28, 28), (255, 0, 0, 128)), "PNG")
    np.testing.assert_allclose(decode_image(red, "red"), 0.299 * 255 * 128 / 255, rtol=1e-5)
