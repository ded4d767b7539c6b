"""SavedModel export with two serving signatures.

* ``serving_default`` — ``image_bytes``: encoded images (PNG, JPEG, GIF, BMP or WebP; any size,
  colour or grayscale), decoded, converted to grayscale and resized to 28×28 in the graph. This is
  what TF Serving's V1 ``{"instances": [{"image_bytes": {"b64": ...}}]}`` requests reach. The
  model server decodes the same way in Python (``fmnist_kfp/images.py``): colour is
  BT.601 luma (``GRAY_WEIGHTS``), transparency shows black (the dataset's background), JPEG
  uses the accurate integer IDCT, then bilinear ``tf.image.resize``. TensorFlow's decoders read
  every such image except colour-palette BMPs (their indices come out as gray levels).
* ``serving_pixels`` — ``pixels``: float32 ``[N, 28, 28]`` intensities 0–255, as in the dataset.

Both return ``probabilities`` [N, 10], ``class_index`` [N] and ``class_name`` [N]. With
``flip_averaging`` the probabilities are the mean of the model's on each image and on its mirror
image (test-time augmentation inside the graph, two forward passes: +0.4–0.5 points of
validation accuracy on every family, ``bench/results/ablation.md``); the signatures are the same.
"""

from __future__ import annotations

from fmnist_kfp.dataset.official import CLASS_NAMES, IMAGE_SIZE

SAVED_MODEL_VERSION = "1"  # <model>/1/: the layout TF Serving and KServe expect
BYTES_SIGNATURE = "serving_default"
PIXELS_SIGNATURE = "serving_pixels"
# ITU-R BT.601 luma: what Pillow's "L" conversion, JPEG's Y and tf.image.rgb_to_grayscale use.
GRAY_WEIGHTS = (0.299, 0.587, 0.114)


def decode_to_gray(encoded):
    """One encoded image to float32 [H, W] gray levels 0–255 (see the module docstring).

    ``channels=0`` keeps each file's own channels: asking TensorFlow for one channel fails on
    GIF, BMP, WebP and CMYK JPEG, and asking for three fails on images with alpha.
    """
    import tensorflow as tf

    image = tf.cond(
        tf.io.is_jpeg(encoded),
        # TensorFlow's default JPEG IDCT is the fast, inexact one; Pillow (and so the model
        # server) uses the accurate one: ask for it, and both give the same pixels.
        lambda: tf.io.decode_jpeg(encoded, channels=0, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_image(encoded, channels=0, expand_animations=False),
    )
    image = tf.cast(image, tf.float32)
    weights = tf.constant(GRAY_WEIGHTS, tf.float32)

    def luma():
        return tf.tensordot(image[..., :3], weights, axes=1)

    return tf.switch_case(tf.shape(image)[-1] - 1, [
        lambda: image[..., 0],
        lambda: image[..., 0] * (image[..., 1] / 255.0),
        luma,
        lambda: luma() * (image[..., 3] / 255.0),
    ])


def export_saved_model(model, export_dir: str, flip_averaging: bool = False) -> None:
    import tensorflow as tf

    class ServingModule(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.class_names = tf.constant(CLASS_NAMES)

        def _predict(self, pixels):
            images = pixels[..., tf.newaxis]
            probabilities = tf.cast(self.model(images, training=False), tf.float32)
            if flip_averaging:
                mirrored = self.model(tf.reverse(images, axis=[2]), training=False)
                probabilities = (probabilities + tf.cast(mirrored, tf.float32)) / 2
            class_index = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
            return {
                "probabilities": probabilities,
                "class_index": class_index,
                "class_name": tf.gather(self.class_names, class_index),
            }

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, IMAGE_SIZE, IMAGE_SIZE], tf.float32, name="pixels")
            ]
        )
        def serve_pixels(self, pixels):
            return self._predict(pixels)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve_bytes(self, image_bytes):
            def decode(encoded):
                gray = decode_to_gray(encoded)[..., tf.newaxis]
                return tf.image.resize(gray, [IMAGE_SIZE, IMAGE_SIZE])[..., 0]  # bilinear

            pixels = tf.map_fn(
                decode,
                image_bytes,
                fn_output_signature=tf.TensorSpec([IMAGE_SIZE, IMAGE_SIZE], tf.float32),
            )
            return self._predict(pixels)

    module = ServingModule()
    tf.saved_model.save(
        module,
        export_dir,
        signatures={
            BYTES_SIGNATURE: module.serve_bytes,
            PIXELS_SIGNATURE: module.serve_pixels,
        },
    )


def load_pixels_predictor(export_dir: str):
    """Returns ``f(pixels float32 [N,28,28]) -> dict`` backed by the exported SavedModel."""
    import tensorflow as tf

    loaded = tf.saved_model.load(export_dir)
    signature = loaded.signatures[PIXELS_SIGNATURE]
    return lambda pixels: signature(pixels=tf.convert_to_tensor(pixels, tf.float32))
