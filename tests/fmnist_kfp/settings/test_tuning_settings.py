"""The search's settings: how many failed trials fail the search (3, or every trial when
there are fewer), and the budgets that may not be negative."""

from __future__ import annotations

from fmnist_kfp.settings.tuning import TuningSettings


def test_the_failed_trial_budget_is_three_or_every_trial():
    assert TuningSettings().failed_trial_budget == 3
    assert TuningSettings(max_trials=2).failed_trial_budget == 2
    assert TuningSettings(max_trials=2, max_failed_trials=0).failed_trial_budget == 0


def test_negative_budgets_are_problems():
    problems = TuningSettings(max_parameters=-1, trial_minutes=-5).problems()
    assert len(problems) == 2
    assert any("max_parameters" in p for p in problems)
    assert any("trial_minutes" in p for p in problems)
