"""The chosen model on photos, for the report: a few test images sent the ways people send
pictures of garments (:mod:`fmnist_kfp.photos`), as sent, as the model sees them after the
server's preprocessing (:mod:`fmnist_kfp.images`), and what it answers."""

from __future__ import annotations

import io

import numpy as np

# One of each: on white, off centre, stored sideways, with a shadow, cut out, small.
EXAMPLE_VARIANTS = ("white_jpeg_300", "off_centre_420x300", "exif_6", "shadow", "cut_out_png",
                    "small_in_large")


def photo_examples(predictor, images: np.ndarray, labels: np.ndarray) -> list[dict]:
    """One example per variant, from the first test images: the image as stored (what a
    viewer ignoring EXIF shows), its format and size, the 28×28 pixels the model gets, the true
    and predicted classes and the predicted class's probability. ``predictor``: the model's
    loaded pixels signature (:func:`fmnist_kfp.training.export.load_pixels_predictor`)."""
    from PIL import Image

    from fmnist_kfp.dataset.official import CLASS_NAMES
    from fmnist_kfp.images import decode_image
    from fmnist_kfp.photos import variant
    from fmnist_kfp.selection.evaluate import predict_with

    names = EXAMPLE_VARIANTS[:len(images)]
    if not names:
        return []
    sent = [variant(images[i], name, seed=i) for i, name in enumerate(names)]
    seen = np.stack([decode_image(data, name) for data, name in zip(sent, names, strict=True)])
    probabilities, classes = predict_with(predictor, seen)
    examples = []
    for i, name in enumerate(names):
        stored = Image.open(io.BytesIO(sent[i]))
        image_format, size = stored.format, list(stored.size)
        stored.thumbnail((160, 160))
        examples.append({
            "variant": name, "format": image_format, "size": size,
            "stored": np.asarray(stored.convert("RGBA")), "seen": seen[i],
            "true": CLASS_NAMES[int(labels[i])], "predicted": CLASS_NAMES[int(classes[i])],
            "probability": float(probabilities[i][int(classes[i])]),
        })
    return examples


def main(argv: list[str] | None = None) -> None:
    """``python -m fmnist_kfp.selection.photo_examples MODEL_DIR DATA_DIR OUT.png``: the report's
    photo grid for a model (its SavedModel directory) on a dataset's first test images (the
    README's picture is made this way from a `make run` model)."""
    import argparse
    import base64
    from pathlib import Path

    from fmnist_kfp.dataset.sources import load
    from fmnist_kfp.selection.report import photo_examples_png
    from fmnist_kfp.training.export import load_pixels_predictor

    parser = argparse.ArgumentParser(description=(main.__doc__ or "").split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("data_dir", help="the four official IDX files")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    test = load(args.data_dir).splits["test"]
    examples = photo_examples(load_pixels_predictor(args.model_dir), test.images, test.labels)
    Path(args.out).write_bytes(base64.b64decode(photo_examples_png(examples)))


if __name__ == "__main__":
    main()
