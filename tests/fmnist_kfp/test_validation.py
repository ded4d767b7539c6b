"""The CLI's checks before any work: every bad parameter named at once, and a directory the
run writes made, or refused naming the flag, when it cannot be one."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.validation import validate_parameters, writable_directory


def test_every_bad_parameter_is_named_at_once():
    parameters = PipelineParameters(epochs=0, num_workers=0)
    with pytest.raises(UserInputError, match="invalid pipeline parameters") as refused:
        validate_parameters(parameters, check_data=False)
    assert "epochs" in str(refused.value) and "num_workers" in str(refused.value)
    good = PipelineParameters()
    assert validate_parameters(good, check_data=False) is good


def test_a_directory_is_made_or_refused_naming_what_it_is_for(tmp_path):
    made = tmp_path / "runs" / "one"
    assert writable_directory(str(made), "--output") == str(made) and made.is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(UserInputError, match="--output .* cannot be made a directory"):
        writable_directory(str(tmp_path / "file" / "below"), "--output")
    assert writable_directory("gs://bucket/runs", "--output") == "gs://bucket/runs"
