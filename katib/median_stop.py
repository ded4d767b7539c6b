"""Katib's ``medianstop`` early-stopping rule as an Optuna pruner, for the local search.

Katib v0.19's median-stop service, once ``min_trials_required`` trials have succeeded, takes for
each succeeded trial the average of its first ``start_step`` objective reports and sends the
median of those averages to the trials' metrics collectors as a rule; a collector stops its
trial when, from its ``start_step``-th report on, the latest objective is worse than that
value. Optuna's own ``MedianPruner`` compares step by step with all earlier trials instead, so
it would stop different trials than Katib does on the cluster: this pruner applies Katib's rule.
"""

from __future__ import annotations

import statistics

import optuna
from optuna.trial import FrozenTrial, TrialState


class KatibMedianStopPruner(optuna.pruners.BasePruner):
    """Stops a trial whose objective, after ``start_step`` reports, is worse than the median
    of the succeeded trials' averages over their first ``start_step`` reports."""

    def __init__(self, min_trials_required: int = 3, start_step: int = 4):
        if min_trials_required < 1 or start_step < 1:
            raise ValueError("min_trials_required and start_step must be at least 1")
        self.min_trials_required = min_trials_required
        self.start_step = start_step

    def threshold(self, study: optuna.Study) -> float | None:
        """The rule's value, or None while too few trials have succeeded."""
        averages = []
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            first = [trial.intermediate_values[step]
                     for step in sorted(trial.intermediate_values)[:self.start_step]]
            if first:
                averages.append(sum(first) / len(first))
        if len(averages) < self.min_trials_required:
            return None
        return statistics.median(averages)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if len(trial.intermediate_values) < self.start_step:
            return False
        threshold = self.threshold(study)
        if threshold is None:
            return False
        latest = trial.intermediate_values[max(trial.intermediate_values)]  # the last step's
        if study.direction == optuna.study.StudyDirection.MAXIMIZE:
            return latest < threshold
        return latest > threshold
