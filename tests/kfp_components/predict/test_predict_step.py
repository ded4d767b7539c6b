"""The predict step's rule: a failed request fails the step; answers unlike the selected
model's fail it only when the server serves that model (an earlier model kept by blessing is
measured, not judged). The comparison itself: tests/serving/deploy/test_verification.py."""

from __future__ import annotations

import dataclasses

import pytest

from fmnist_kfp.kfp_components.predict.step import ServedModelMismatch, judge
from fmnist_kfp.serving.deploy.verification import Comparison

URL = "http://fashion-mnist.kubeflow.svc.cluster.local/v1/models/fashion-mnist:predict"
AGREES = Comparison(url=URL, requests=5, failures=0, images=50, correct=40, accuracy=0.8,
                    seconds=1.0, errors=[], ok=True, agreement=1.0, near_ties=0,
                    unexplained_disagreements=0, max_probability_difference=1e-6,
                    probability_tolerance=1e-3, expected_accuracy=0.8)
DIFFERS = dataclasses.replace(AGREES, ok=False, agreement=0.5, unexplained_disagreements=25,
                              accuracy=0.4)
FAILED = dataclasses.replace(AGREES, failures=2, ok=False, errors=["HTTP 503"])


def test_a_server_that_answers_like_the_selected_model_passes():
    judge(AGREES, URL, serves_model=True)
    judge(AGREES, URL, serves_model=False)


def test_answers_unlike_the_selected_model_fail_only_where_it_is_served():
    with pytest.raises(ServedModelMismatch, match="does not answer like the selected model"):
        judge(DIFFERS, URL, serves_model=True)
    judge(DIFFERS, URL, serves_model=False)  # an earlier, blessed model: measured only


def test_failed_requests_fail_the_step_whichever_model_is_served():
    for serves_model in (True, False):
        with pytest.raises(ServedModelMismatch, match=r"2 requests to .* failed: \['HTTP 503'\]"):
            judge(FAILED, URL, serves_model=serves_model)
