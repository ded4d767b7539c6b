"""The arguments of a Kubeflow run, checked over the compiled pipeline's defaults before they
are sent: typed as the pipeline declares them, every problem named at once."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.pipelines.arguments import cluster_arguments


def test_only_the_given_parameters_are_sent_typed():
    assert cluster_arguments(epochs=12, num_workers=4) == {"epochs": 12, "num_workers": 4}
    assert cluster_arguments(epochs=12.0) == {"epochs": 12}


def test_an_unknown_name_or_a_bad_value_is_named_before_anything_is_sent():
    with pytest.raises(UserInputError, match="epoch"):
        cluster_arguments(epoch=3)
    with pytest.raises(UserInputError, match="invalid pipeline parameters") as refused:
        cluster_arguments(epochs=0, num_workers=0)
    assert "epochs" in str(refused.value) and "num_workers" in str(refused.value)
