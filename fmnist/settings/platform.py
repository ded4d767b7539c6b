"""Compile-time settings of the Kubeflow variant: the component image, the shared volume and
the object-store Secret.

They are read from ``FMNIST_*`` environment variables when the pipeline is compiled and baked
into every task of the compiled YAML as environment variables of the same names (see
:meth:`Platform.env`), so the step pods read the same values at run time — the TFJobs, Katib
trials and ServingRuntime they create run the image the pipeline was compiled with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fmnist import __version__
from fmnist.errors import UserInputError
from fmnist.settings.names import has_tag

IMAGE_ENV = "FMNIST_COMPONENT_IMAGE"
PVC_ENV = "FMNIST_PVC_NAME"
SECRET_ENV = "FMNIST_CREDENTIALS_SECRET"
DEFAULT_IMAGE_REPOSITORY = "ghcr.io/fmnist-kfp/fmnist-kfp"
MOUNT_PATH = "/mnt/fmnist"


def component_image() -> str:
    """The image every component runs in: ``$FMNIST_COMPONENT_IMAGE`` or the release image.

    It must carry a tag or digest: an untagged image would let steps and TFJob workers of one
    run pull different code."""
    image = os.environ.get(IMAGE_ENV, "").strip() or f"{DEFAULT_IMAGE_REPOSITORY}:{__version__}"
    if not has_tag(image):
        raise UserInputError(
            f"{IMAGE_ENV}={image!r} has no tag; pin one, e.g. {image}:{__version__}"
        )
    return image


@dataclass(frozen=True)
class Platform:
    """What the Kubeflow variant is compiled against.

    The training and tuning steps and their TFJob pods share ``pvc_name`` at ``MOUNT_PATH``
    (dataset copy, checkpoints, exports); ingestion and training get the object-store
    credentials of ``credentials_secret`` as environment variables (for s3:// data sources),
    only when one is named: the compiled YAML then needs that Secret to exist. None is
    referenced by default, because KFP backends before 2.15.0 drop ``optional`` on a Secret
    turned into env vars (kubeflow/pipelines commit 55ec846, first in 2.15.0; 2.5.0
    ``backend/src/common/util/json.go`` L72-75 ignores the unknown field), so a missing
    optional Secret would stop the pods in CreateContainerConfigError.
    """

    image: str
    pvc_name: str = "fmnist-data"
    credentials_secret: str = ""
    credential_keys: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

    @classmethod
    def from_env(cls) -> Platform:
        return cls(
            image=component_image(),
            pvc_name=os.environ.get(PVC_ENV, "").strip() or cls.pvc_name,
            credentials_secret=os.environ.get(SECRET_ENV, "").strip(),
        )

    def env(self) -> dict[str, str]:
        """The environment every task of the compiled pipeline carries (each component
        carries its own image, see ``kfp_components.base``)."""
        return {PVC_ENV: self.pvc_name}
