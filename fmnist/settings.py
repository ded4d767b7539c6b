"""Settings read at compile time (the component image) and at run time (the data location)."""

from __future__ import annotations

import os

from fmnist import __version__

IMAGE_ENV = "FMNIST_COMPONENT_IMAGE"
DEFAULT_IMAGE_REPOSITORY = "ghcr.io/fmnist-kfp/fmnist-kfp"


def component_image() -> str:
    """The image every component runs in: ``$FMNIST_COMPONENT_IMAGE`` or the release image."""
    return os.environ.get(IMAGE_ENV, "").strip() or f"{DEFAULT_IMAGE_REPOSITORY}:{__version__}"
