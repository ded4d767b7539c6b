"""Compile-time settings of the Kubeflow variant: the images, the shared volume and the
object-store Secret; and the step inputs that carry the images to the pods a step creates.

They are read from ``FMNIST_*`` environment variables when the pipeline and the components are
compiled (never when a module is imported), unless the images are given (``--image``,
``image=``), which wins:

* ``FMNIST_COMPONENT_IMAGE`` — the image every step runs in (the ``cpu`` target of the
  Dockerfile) and, through the steps' ``image`` input, every pod they create without GPUs;
* ``FMNIST_GPU_IMAGE`` — the image of TFJob replicas and Katib trials that request GPUs (the
  ``gpu`` target), through the ``gpu_image`` input of the train and tune steps; by default the
  component image's tag with ``-gpu`` appended, the name the release workflow pushes it under;
* ``FMNIST_PVC_NAME`` — the shared claim, baked into every task of the compiled pipeline as an
  environment variable of that name (:meth:`Platform.env`), which the steps read at run time;
* ``FMNIST_CREDENTIALS_SECRET`` — the object-store Secret, when one is named.

The images reach the pods a step creates through one path only: the step's ``image`` and
``gpu_image`` inputs (:class:`JobImages`), whose defaults are the images the component was
compiled with and which the pipeline sets from its :class:`Platform`. No run-time code reads
the image from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from fmnist_kfp import __version__
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.names import has_tag, image_problem, image_rule
from fmnist_kfp.settings.schema import Settings, setting

IMAGE_ENV = "FMNIST_COMPONENT_IMAGE"
GPU_IMAGE_ENV = "FMNIST_GPU_IMAGE"
PVC_ENV = "FMNIST_PVC_NAME"
SECRET_ENV = "FMNIST_CREDENTIALS_SECRET"
DEFAULT_IMAGE_REPOSITORY = "ghcr.io/fmnist-kfp/fmnist-kfp"
GPU_TAG_SUFFIX = "-gpu"  # <repository>:<version>-gpu beside <repository>:<version>
MOUNT_PATH = "/mnt/fmnist"
# Who the image runs as (Dockerfile: ``USER 1000:0``; tests/test_image.py holds them together).
# Every pod this package creates runs so too, and owns the shared volume's files with group 0,
# the group KFP's own step pods run in: KFP can set no fsGroup on them (see
# fmnist_kfp.kubernetes.storage), so group 0 is the one group every writer of the volume shares.
IMAGE_UID = 1000
IMAGE_GID = 0


# What every process that imports TensorFlow starts with, set before the import: tf.keras is
# tf_keras (the Keras 2 every model here is built with), so TensorFlow does not import Keras 3
# as well (about 1.5 s of each process's start on 2 cores); TensorFlow's C++ INFO and WARNING
# lines (oneDNN, CPU features) off. The image sets them (Dockerfile ENV, tests/test_image.py);
# a value already in the environment wins.
TENSORFLOW_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def tensorflow_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """:data:`TENSORFLOW_ENV`, each value overridden by ``environ``'s."""
    return {name: environ.get(name, value) for name, value in TENSORFLOW_ENV.items()}


def use_tensorflow_env() -> None:
    """Sets :data:`TENSORFLOW_ENV` in this process's environment where unset: call it before
    TensorFlow is imported; child processes inherit it."""
    for name, value in TENSORFLOW_ENV.items():
        os.environ.setdefault(name, value)


RELEASE_IMAGE = f"{DEFAULT_IMAGE_REPOSITORY}:{__version__}"
RELEASE_GPU_IMAGE = RELEASE_IMAGE + GPU_TAG_SUFFIX
# The versions whose images the release workflow has pushed (.github/workflows/release.yml);
# add a version here in the commit after its release. Compiling for the release image of any
# other version says once that the image does not exist yet (:func:`unpublished_image_note`).
PUBLISHED_VERSIONS: frozenset[str] = frozenset()


def component_image(image: str | None = None) -> str:
    """The image every component runs in: ``image`` if given, else
    ``$FMNIST_COMPONENT_IMAGE``, else the release image. Read when a pipeline is compiled,
    never when a module is imported.

    It must carry a tag or digest: an untagged image would let steps and TFJob workers of one
    run pull different code."""
    given = (image or "").strip()
    image = given or os.environ.get(IMAGE_ENV, "").strip() or RELEASE_IMAGE
    problem = image_problem(image, __version__)
    if problem:
        source = f"the image {image!r}" if given else f"{IMAGE_ENV}={image!r}"
        raise UserInputError(f"{source} {problem}")
    return image


class UnpublishedImageWarning(UserWarning):
    """Compiling for a release image that no release has pushed yet."""


def unpublished_image_note(image: str) -> str:
    """What to say when compiling for ``image``: nothing, unless it is this version's release
    image and no release of this version has pushed it."""
    if image not in (RELEASE_IMAGE, RELEASE_GPU_IMAGE) or __version__ in PUBLISHED_VERSIONS:
        return ""
    return (f"{image} is not published: no release of fmnist-kfp {__version__} has been "
            "tagged yet. Build the image from the repository (`docker build --target cpu -t "
            f"<registry>/fmnist-kfp:{__version__} .`, docs/install.md#images) and compile for "
            f"it with --image (the Python API's image=, or ${IMAGE_ENV}).")


def repository(image: str) -> str:
    """``registry:5000/team/fmnist:0.2.0@sha256:…`` → ``registry:5000/team/fmnist``."""
    head, _, last = image.split("@", 1)[0].rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


def derived_gpu_image(image: str) -> str:
    """The GPU twin of a tagged component image: its tag with ``-gpu`` appended
    (``ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0`` → ``…:0.2.0-gpu``), the name the release workflow
    pushes the ``gpu`` target under. A component image pinned by digest has none to derive (the
    digest is the CPU image's): refused, naming the fix."""
    if "@" in image:
        raise UserInputError(
            f"the component image {image!r} is pinned by digest, so the GPU image of TFJob "
            "replicas and Katib trials that request GPUs cannot be derived from it (the digest "
            f"is the CPU image's): give the GPU image as well (--gpu-image, gpu_image= or "
            f"{GPU_IMAGE_ENV}), e.g. {repository(image)}:{__version__}{GPU_TAG_SUFFIX}"
            "@sha256:<digest>")
    if not has_tag(image):
        raise UserInputError(f"image {image!r} has no tag to derive the GPU image's from")
    return image + GPU_TAG_SUFFIX


def gpu_image(explicit: str | None = None, image: str | None = None) -> str:
    """The image of the TFJob replicas and Katib trials that request GPUs: ``explicit`` if
    given; else, when the component ``image`` is given, its GPU twin (an image given beside a
    stale ``$FMNIST_GPU_IMAGE`` must not mix builds); else ``$FMNIST_GPU_IMAGE``; else the GPU
    twin of :func:`component_image`."""
    given, source = (explicit or "").strip(), "the GPU image "
    if not given and not (image or "").strip():
        given, source = os.environ.get(GPU_IMAGE_ENV, "").strip(), f"{GPU_IMAGE_ENV}="
    if not given:
        return derived_gpu_image(component_image(image))
    problem = image_problem(given, f"{__version__}{GPU_TAG_SUFFIX}")
    if problem:
        raise UserInputError(f"{source}{given!r} {problem}")
    return given


@dataclass
class JobImages(Settings):
    """The images of the pods a step creates on Kubernetes: the ``image`` input of the train,
    tune, batch-prediction and deploy components and the ``gpu_image`` input of the train and
    tune components. Their defaults in a compiled component are the images it was compiled
    with; the pipeline passes its :class:`Platform`'s. Not pipeline parameters: a run cannot
    make the jobs run other code than its steps."""

    WHAT = "job images"

    image: str = setting(
        "", help="The image of the pods this step creates on Kubernetes; default: the image "
                 "this component was compiled with.",
        help_for={
            "train": "The image of the training job's pods that request no GPU (a TFJob's "
                     "replicas or a TrainJob's nodes); default: the image this component was "
                     "compiled with.",
            "tune": "The image of the Katib trials' pods that request no GPU (each trial a "
                    "TFJob or a TrainJob); default: the image this component was compiled "
                    "with.",
            "batch_predict": "The image of the batch-prediction Job's pods; default: the image "
                             "this component was compiled with.",
            "deploy": "The image of our ServingRuntime's predictor (unless `serving.image` "
                      "names another); default: the image this component was compiled with.",
            "promote": "The image of our ServingRuntime's predictor (unless `serving.image` "
                       "names another); default: the image this component was compiled with.",
        },
        rules=[image_rule])
    gpu_image: str = setting(
        "", help="The image of the pods this step creates that request GPUs "
                 "(`gpus_per_worker` > 0): the same code with TensorFlow's CUDA libraries; "
                 "default: the GPU image this component was compiled with.",
        help_for={
            "train": "The image of the training job's pods that request GPUs "
                     "(`gpus_per_worker` > 0): the same code with TensorFlow's CUDA libraries; "
                     "default: the GPU image this component was compiled with.",
            "tune": "The image of the Katib trials' pods that request GPUs "
                    "(`gpus_per_worker` > 0): the same code with TensorFlow's CUDA libraries; "
                    "default: the GPU image this component was compiled with.",
        },
        rules=[image_rule])

    @classmethod
    def release(cls) -> JobImages:
        """The images components are built with, as their defaults: this version's release
        images. Compiling puts the chosen images in their place (:class:`Platform`)."""
        return cls(image=RELEASE_IMAGE, gpu_image=RELEASE_GPU_IMAGE)

    @classmethod
    def chosen(cls, image: str | None = None, gpu: str | None = None) -> JobImages:
        """The images to compile for: the given ones, else ``$FMNIST_COMPONENT_IMAGE`` and
        ``$FMNIST_GPU_IMAGE``, else the release's (:func:`component_image`, :func:`gpu_image`)."""
        return cls(image=component_image(image), gpu_image=gpu_image(gpu, image))


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
    gpu_image: str = ""  # empty: derived from image (derived_gpu_image)
    pvc_name: str = "fmnist-data"
    credentials_secret: str = ""
    credential_keys: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

    def __post_init__(self) -> None:
        if not self.gpu_image:
            object.__setattr__(self, "gpu_image", derived_gpu_image(self.image))

    @classmethod
    def release(cls) -> Platform:
        """The platform the pipeline is built for before it is compiled: the release images
        and the default claim. Nothing is read from the environment."""
        return cls(image=RELEASE_IMAGE, gpu_image=RELEASE_GPU_IMAGE)

    @classmethod
    def from_env(cls, image: str | None = None, gpu_image: str | None = None) -> Platform:
        """The platform to compile for, read when compiling: the given images, else the
        ``FMNIST_*`` variables (:class:`JobImages`), and the claim and Secret from them."""
        images = JobImages.chosen(image, gpu_image)
        return cls(
            image=images.image,
            gpu_image=images.gpu_image,
            pvc_name=os.environ.get(PVC_ENV, "").strip() or cls.pvc_name,
            credentials_secret=os.environ.get(SECRET_ENV, "").strip(),
        )

    def env(self) -> dict[str, str]:
        """The environment every task of the compiled pipeline carries: the claim the steps
        mount, which they hand to the pods they create (the images go as step inputs)."""
        return {PVC_ENV: self.pvc_name}
