"""Settings read at compile time (the component image) and at run time (the data location)."""

from __future__ import annotations

import os

from fmnist import __version__

IMAGE_ENV = "FMNIST_COMPONENT_IMAGE"
DEFAULT_IMAGE_REPOSITORY = "ghcr.io/fmnist-kfp/fmnist-kfp"


def component_image() -> str:
    """The image every component runs in: ``$FMNIST_COMPONENT_IMAGE`` or the release image.

    It must carry a tag or digest: an untagged image would let steps and TFJob workers of one
    run pull different code."""
    image = os.environ.get(IMAGE_ENV, "").strip() or f"{DEFAULT_IMAGE_REPOSITORY}:{__version__}"
    if ":" not in image.rsplit("/", 1)[-1]:
        from fmnist.errors import UserInputError

        raise UserInputError(
            f"{IMAGE_ENV}={image!r} has no tag; pin one, e.g. {image}:{__version__}"
        )
    return image
