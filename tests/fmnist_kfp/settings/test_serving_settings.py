"""Serving's settings: the model URIs KServe's storage initializer can fetch (each refusal
says the form to use) and the blessing tolerance, an accuracy difference."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.serving import check_storage_uri, check_tolerance


@pytest.mark.parametrize("uri", ["pvc://fmnist-data/models/best", "s3://bucket/models/1",
                                 "gs://my.bucket"])
def test_a_uri_kserve_can_fetch_passes(uri):
    assert check_storage_uri(f" {uri} ") == uri


@pytest.mark.parametrize(("uri", "message"), [
    ("/mnt/fmnist/models/best", "without the mount path"),
    ("http://example.com/model", "use pvc://<claim>/<path>"),
    ("pvc://Fmnist_Data/models", "names no valid claim"),
    ("s3://-bucket/model", "names no valid bucket"),
    ("pvc://fmnist-data/", "has no path inside the claim"),
])
def test_a_uri_it_cannot_fetch_is_refused_with_the_form_to_use(uri, message):
    with pytest.raises(UserInputError, match=message):
        check_storage_uri(uri)


def test_the_tolerance_is_an_accuracy_difference():
    check_tolerance(0.0)
    check_tolerance(0.005)
    with pytest.raises(UserInputError, match=r"not an accuracy difference in \[0, 1\]"):
        check_tolerance(1.5)
