"""SavedModel export with two serving signatures.

* ``serving_default`` — ``image_bytes``: encoded images (PNG, JPEG, GIF or BMP; any size, colour
  or grayscale), decoded, converted to grayscale and resized to 28×28 in the graph. This is what
  TF Serving's V1 ``{"instances": [{"image_bytes": {"b64": ...}}]}`` requests reach.
* ``serving_pixels`` — ``pixels``: float32 ``[N, 28, 28]`` intensities 0–255, as in the dataset.

Both return ``probabilities`` [N, 10], ``class_index`` [N] and ``class_name`` [N].
"""

from __future__ import annotations

from fmnist.dataset.official import CLASS_NAMES, IMAGE_SIZE

SAVED_MODEL_VERSION = "1"  # <model>/1/: the layout TF Serving and KServe expect
BYTES_SIGNATURE = "serving_default"
PIXELS_SIGNATURE = "serving_pixels"


def export_saved_model(model, export_dir: str) -> None:
    import tensorflow as tf

    class ServingModule(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.class_names = tf.constant(CLASS_NAMES)

        def _predict(self, pixels):
            probabilities = tf.cast(self.model(pixels[..., tf.newaxis], training=False), tf.float32)
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
                image = tf.io.decode_image(encoded, channels=1, expand_animations=False)
                image = tf.image.resize(image, [IMAGE_SIZE, IMAGE_SIZE])  # float32, 0–255 kept
                return image[..., 0]

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
