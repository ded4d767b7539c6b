"""Image references as a container runtime parses them (fmnist_kfp/settings/names.py, after
github.com/distribution/reference v0.6.0 and opencontainers/go-digest v1.0.0): every image we
are given is checked when it is given, not when a pod cannot pull it."""

from __future__ import annotations

import pytest

from fmnist_kfp.settings.names import has_tag, image_problem, image_reference_problem

SHA = "a" * 64


@pytest.mark.parametrize("image", [
    "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
    "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0-gpu",
    "python:3.11",
    "docker.io/library/python:3.11-slim",
    "localhost:5000/team/fmnist-kfp:1",
    "[::1]:5000/fmnist-kfp:1",
    "nvcr.io/nvidia/tensorflow:24.01-tf2-py3",
    "registry.example.com/ml/fmnist__kfp.x:1",
    "r.example/" + "a" * 255 + ":1",  # the domain is not counted
    f"registry.example.com/ml/fmnist-kfp@sha256:{SHA}",
    f"registry.example.com/ml/fmnist-kfp:0.2.0@sha256:{SHA}",
    f"r.example/f@sha512:{'b' * 128}",
])
def test_what_a_container_runtime_accepts_is_accepted(image):
    assert image_reference_problem(image) is None
    assert image_problem(image) is None and has_tag(image)


@pytest.mark.parametrize(("image", "problem"), [
    ("registry.example.com/ml/fmnist-kfp:", "it ends in ':' with nothing after it"),
    ("registry.example.com/ml/fmnist-kfp@", "it ends in '@' with nothing after it"),
    ("Registry.example.com/ML/fmnist-kfp:1", "the repository name must be lowercase"),
    ("registry.example.com/ML/fmnist-kfp:1", "the repository name must be lowercase"),
    ("http://registry.example.com/fmnist-kfp:1", "an image reference has no scheme"),
    ("r.example/fmnist@sha256:abc", "its digest is not <algorithm>:<hex digits>"),
    (f"r.example/fmnist@sha256:{SHA[:-1]}", "a sha256 digest is 64 lowercase hex digits"),
    (f"r.example/fmnist@sha256:{SHA.upper()}", "a sha256 digest is 64 lowercase hex digits"),
    (f"r.example/fmnist@md5:{SHA}", "digest algorithm 'md5' is not one of"),
    ("r.example/fmnist:" + "1" * 129, "it is not <registry>/<repository>"),  # tag <= 128
    ("r.example/-fmnist:1", "it is not <registry>/<repository>"),
    ("r.example/fmnist kfp:1", "it is not <registry>/<repository>"),
    ("r.example/" + "a" * 256 + ":1", "longer than 255 characters"),
])
def test_what_it_refuses_is_refused_saying_why(image, problem):
    found = image_reference_problem(image)
    assert found is not None and problem in found, found
    assert image_problem(image).startswith(f"is not an image reference: {found}; e.g. ")


def test_an_untagged_image_is_refused_with_the_example_it_was_given():
    assert image_reference_problem("r.example/fmnist") is None and not has_tag("r.example/fmnist")
    assert image_problem("r.example/fmnist", "0.2.0-gpu") == (
        "has no tag; pin one (e.g. r.example/fmnist:0.2.0-gpu) so every pod runs the same code")
