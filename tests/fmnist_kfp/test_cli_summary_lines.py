"""The lines `fmnist-kfp run --local` ends with say what happened (issue 40 item 3)."""

from __future__ import annotations

from fmnist_kfp.cli import _serving_line
from fmnist_kfp.serving.deploy.blessing import bless, bless_early


def test_a_first_deployment_says_it_was_created_because_nothing_was_served():
    for decision in (bless(0.93, None, 0.005), bless_early(0.9, None, None, 0.005)):
        assert decision.blessed and decision.reason == "nothing was served before"
    line = _serving_line({
        "deployment": {"url": "http://127.0.0.1:43293", "action": "created",
                       "blessing": bless(0.93, None, 0.005).as_dict(), "served_accuracy": 0.944,
                       "model_name": "fashion-mnist"},
        "parameters": {"prediction_images": 1000}})
    assert line.splitlines()[0] == (
        "Serving: http://127.0.0.1:43293 (created: nothing was served before); served accuracy "
        "0.9440 over HTTP on a sample of 1,000 test images (the test accuracy above: the whole "
        "test split)")
    assert line.splitlines()[1].startswith(
        "         ask it about a photo: curl -s "
        "http://127.0.0.1:43293/v1/models/fashion-mnist:predict")
    assert line.splitlines()[-1] == (
        "         stop it with: fmnist-kfp deployment stop --name fashion-mnist")
