"""The hyperparameter search (the ``tuning`` parameter): every key optional.

Types are checked here; what Katib would refuse (counts, the early-stopping budget) is checked
where the Experiment is built, in Katib's own terms
(:class:`fmnist_kfp.tuning.experiment_settings.ExperimentSettings`), for both backends. Trials score
on the dataset's validation split (the pipeline's
``validation_examples``, set aside at ingestion), never the test split."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.settings.schema import Settings, not_negative, setting


@dataclass
class TuningSettings(Settings):
    WHAT = "tuning settings"

    algorithm: str = setting(
        "tpe", help="`random`, `grid`, `tpe`, `multivariate-tpe` (both backends); "
                    "`bayesianoptimization`, `cmaes` (Katib only).")
    max_trials: int = setting(12, help="Trials in all.")
    parallel_trials: int = setting(
        2, help="Trials at a time (locally at most one per core).")
    max_failed_trials: int | None = setting(
        None, help="The search fails once more trials than this failed (default: 3, or "
                   "max_trials when that is smaller).")
    epochs: int = setting(6, help="Epochs per trial (the final training keeps its own).")
    train_examples: int = setting(
        0, help="Train each trial on the first N examples of the training split (0: all).")
    early_stopping: bool = setting(True, help="Katib's `medianstop` early stopping.")
    min_trials_required: int = setting(
        3, help="medianstop: succeeded trials before any trial is stopped.")
    start_step: int = setting(
        2, help="medianstop: epochs before a trial can be stopped.")
    objective_goal: float | None = setting(
        None, help="Stop once a trial's validation accuracy reaches it.")
    random_state: int | None = setting(None, help="Seed of the search algorithm.")
    max_parameters: int = setting(
        100_000, help="A configuration with more parameters than this is never trained: "
                      "pruned before it starts here, refused by the Katib trial before it "
                      "trains (reported with objective 0, which the search learns from), and "
                      "marked OverParameterBudget (0: no budget). The default models keep "
                      "under 100k.",
        rules=[not_negative])
    trial_minutes: int = setting(
        60, help="Kubeflow: minutes a trial may take, for the step's deadline: one per round "
                 "of parallel_trials (ceil(max_trials / parallel_trials) rounds) plus 10; past "
                 "it the step deletes the Experiment and fails, naming the trials that never "
                 "progressed (kubernetes.active_deadline_seconds, when set, replaces it; 0 "
                 "and no active_deadline_seconds: no deadline).",
        rules=[not_negative])

    @property
    def failed_trial_budget(self) -> int:
        if self.max_failed_trials is not None:
            return self.max_failed_trials
        return min(3, self.max_trials)
