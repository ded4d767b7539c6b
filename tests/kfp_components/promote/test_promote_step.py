"""The early promotion step refuses bad serving parameters, on either backend, before it
reads the validation split or loads the model (the promotion itself and its race:
test_promotion_race.py)."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.promote.step import promote


@pytest.mark.parametrize(("backend", "serving", "message"), [
    ("cloud", {}, "unknown backend 'cloud'"),
    ("kubernetes", {}, "no predictor image"),
    ("local", {"max_batch_size": 0}, "max_batch_size=0 must be at least 1"),
    ("local", {"port": 8080}, "unknown serving settings ['port']"),
])
def test_bad_serving_parameters_are_refused_before_any_work(tmp_path, backend, serving,
                                                            message):
    with pytest.raises(UserInputError, match="invalid serving parameters") as refused:
        promote(model_dir=str(tmp_path / "none"), model_uri="", model_type="basic",
                data_dir=str(tmp_path / "no-data"), backend=backend, model_name="fashion-mnist",
                tolerance=0.01, verification_images=50, serving=serving)
    assert message in str(refused.value)
