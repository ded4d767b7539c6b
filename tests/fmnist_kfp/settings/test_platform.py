"""The images the steps and jobs run: the component image (given, else the environment's,
else the release's, always tagged), its GPU twin, and TensorFlow's environment."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.platform import (
    GPU_IMAGE_ENV,
    IMAGE_ENV,
    RELEASE_GPU_IMAGE,
    RELEASE_IMAGE,
    component_image,
    derived_gpu_image,
    gpu_image,
    repository,
    tensorflow_env,
)

IMAGE = "registry.example.com:5000/ml/fmnist-kfp:0.2.0"


def test_the_component_image_is_given_else_the_environments_else_the_release(monkeypatch):
    monkeypatch.delenv(IMAGE_ENV, raising=False)
    assert component_image() == RELEASE_IMAGE
    monkeypatch.setenv(IMAGE_ENV, IMAGE)
    assert component_image() == IMAGE
    assert component_image("other/fmnist:1") == "other/fmnist:1"
    monkeypatch.setenv(IMAGE_ENV, "registry.example.com:5000/ml/fmnist-kfp")  # no tag
    with pytest.raises(UserInputError, match=IMAGE_ENV):
        component_image()


def test_the_gpu_image_is_the_tag_with_gpu_never_from_a_digest(monkeypatch):
    monkeypatch.delenv(IMAGE_ENV, raising=False)
    monkeypatch.delenv(GPU_IMAGE_ENV, raising=False)
    assert gpu_image() == RELEASE_GPU_IMAGE
    assert derived_gpu_image(IMAGE) == IMAGE + "-gpu"
    # A component image given beside a stale environment GPU image is not mixed with it.
    monkeypatch.setenv(GPU_IMAGE_ENV, "stale/fmnist:0.1.0-gpu")
    assert gpu_image(image=IMAGE) == IMAGE + "-gpu"
    with pytest.raises(UserInputError, match="pinned by digest"):
        derived_gpu_image(IMAGE + "@sha256:" + "a" * 64)
    assert repository(IMAGE + "@sha256:" + "a" * 64) == "registry.example.com:5000/ml/fmnist-kfp"


def test_tensorflows_environment_is_ours_unless_the_user_set_it():
    assert tensorflow_env({})["TF_USE_LEGACY_KERAS"] == "1"
    assert tensorflow_env({"TF_CPP_MIN_LOG_LEVEL": "0"})["TF_CPP_MIN_LOG_LEVEL"] == "0"
