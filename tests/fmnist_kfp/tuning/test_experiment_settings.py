"""The search's own rules (fmnist_kfp.tuning.experiment_settings): each problem named with its
fix, all of them at once, before anything is built; what the settings derive (the step's
deadline, where trials write, the experiment the ``tuning`` settings describe). The Experiment
built from them, and Katib's and the CRDs' verdicts on it: tests/fmnist_kfp/kubernetes/
test_katib_experiment.py."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.settings.tuning import TuningSettings
from fmnist_kfp.tuning.experiment_settings import (
    SEARCH_SLACK_SECONDS,
    EarlyStopping,
    ExperimentSettings,
)
from fmnist_kfp.tuning.search_space import Parameter, SearchSpace

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"


def _settings(**overrides) -> ExperimentSettings:
    kubernetes = KubernetesSettings(image=IMAGE, namespace="team-a", pvc_name="fmnist-pvc")
    values = dict(name="fmnist-tune", kubernetes=kubernetes, model_type="dropout")
    values.update(overrides)
    return ExperimentSettings(**values)


def _space(*changes: Parameter) -> SearchSpace:
    space = SearchSpace.default("tpe", "dropout")
    for change in changes:
        space = space.with_parameter(change)
    return space


def test_the_default_settings_have_no_problem():
    settings = _settings()
    assert settings.problems(SearchSpace.default("tpe", "dropout")) == []
    assert settings.validate() is settings
    # A search on this machine only needs no cluster settings.
    assert ExperimentSettings(name="fmnist-tune").problems() == []


def test_every_problem_is_named_at_once():
    settings = _settings(algorithm="annealing", max_trial_count=1, parallel_trial_count=2,
                         resume_policy="Always")
    space = _space(Parameter.double("dropout_rate", 0.6, 0.1))
    problems = settings.problems(space)
    assert any("unknown algorithm" in p for p in problems)
    assert any("below parallel_trial_count" in p for p in problems)
    assert any("unknown resume policy" in p for p in problems)
    assert any("inverted" in p for p in problems)


def test_validate_raises_every_problem_in_one_user_error():
    settings = _settings(max_trial_count=0, resume_policy="Always")
    with pytest.raises(UserInputError) as raised:
        settings.validate()
    message = str(raised.value)
    assert message.startswith("invalid Katib experiment: ")
    assert "max_trial_count must be at least 1, got 0" in message
    assert "unknown resume policy 'Always'; choose one of Never, LongRunning, FromVolume" in \
        message


@pytest.mark.parametrize(("changes", "message"), [
    ({"name": "x" * 41}, "is longer than 40 characters: trial pod names built from it must "
                         "stay DNS labels"),
    ({"name": "tune-"}, "experiment name 'tune-' must start with a lowercase letter"),
    ({"additional_metrics": ("val_loss", "val_loss")}, "additional_metrics lists a metric twice"),
    ({"additional_metrics": ("f1",)}, "the trainer does not report ['f1']"),
    ({"metric_strategy": "mean"}, "unknown metric strategy 'mean'; choose one of latest, max, "
                                  "min"),
    ({"objective_goal": 90.0}, "objective goal 90.0 is not an accuracy: give one in (0, 1]"),
    ({"parallel_trial_count": 0}, "parallel_trial_count must be at least 1, got 0"),
    ({"max_failed_trial_count": -1}, "max_failed_trial_count must be 0 or more, got -1"),
    ({"max_failed_trial_count": 13, "max_trial_count": 12},
     "max_failed_trial_count (13) exceeds max_trial_count (12)"),
    ({"early_stopping": EarlyStopping(algorithm="hyperband")},
     "unknown early stopping algorithm 'hyperband'; choose one of medianstop"),
    ({"early_stopping": EarlyStopping(min_trials_required=0)},
     "early stopping min_trials_required must be at least 1"),
    ({"early_stopping": EarlyStopping(min_trials_required=12), "max_trial_count": 12},
     "it would never stop one: lower min_trials_required or raise max_trial_count"),
    ({"early_stopping": EarlyStopping(start_step=0)},
     "early stopping start_step (an epoch count) must be at least 1"),
    ({"max_parameters": -1}, "max_parameters must be 0 (no budget) or more, got -1"),
    # The trials' job: the job spec's own rule (fmnist_kfp.settings.jobs.job_problems).
    ({"num_workers": 0}, "num_workers must be at least 1, got 0"),
])
def test_each_rule_names_its_problem(changes, message):
    problems = _settings(**changes).problems()
    assert len(problems) == 1 and message in problems[0], problems


def test_an_accuracy_goal_is_checked_only_for_an_accuracy_objective():
    assert _settings(objective_goal=1.0).problems() == []
    assert _settings(objective_metric="val_loss", additional_metrics=("loss",),
                     objective_goal=0.25).problems() == []
    assert _settings(objective_metric="val_loss", additional_metrics=("loss",),
                     objective_goal=3.0).problems() == []


def test_the_trial_budget_is_checked_against_the_search_space_only_when_it_is_sound():
    """Early stopping needs a trial longer than ``start_step`` epochs: the fewest epochs the
    space lets a trial run, else the base configuration's; a broken space names its own
    problem and nothing is counted from it."""
    stopping = EarlyStopping(start_step=3)
    space = _space(Parameter.integer("epochs", 3, 8))
    problems = _settings(early_stopping=stopping).problems(space)
    assert problems == ["early stopping start_step 3 is not below the fewest epochs a trial "
                        "runs (3), so no trial could be stopped early: lower start_step"]
    assert _settings(early_stopping=stopping).problems(
        _space(Parameter.integer("epochs", 4, 8))) == []
    broken = _space(Parameter.integer("epochs", 8, 3))
    assert not any("start_step" in p for p in _settings(early_stopping=stopping).problems(
        broken))


def test_the_katib_backend_needs_trial_pods_and_shared_storage():
    settings = ExperimentSettings(name="fmnist-tune")
    assert settings.cluster_problems() == [
        "the Katib backend needs kubernetes settings (image, namespace, pvc_name or "
        "output_dir) for the trial pods"]
    unshared = _settings(kubernetes=KubernetesSettings(image=IMAGE))
    assert [p for p in unshared.problems() if "shared storage" in p] == [
        "trials need shared storage for their checkpoints and models: set output_dir (an "
        "object-store URI) or kubernetes.pvc_name"]
    assert _settings(kubernetes=KubernetesSettings(image=IMAGE),
                     output_dir="s3://bucket/runs").problems() == []


def test_trials_write_under_the_output_dir_else_on_the_claim():
    assert _settings().trials_root == "/mnt/fmnist/katib/fmnist-tune"
    assert _settings(output_dir="s3://bucket/runs/").trials_root == "s3://bucket/runs/fmnist-tune"


def test_the_namespace_is_the_experiments_own_else_the_pods():
    assert _settings().target_namespace == "team-a"
    assert _settings(namespace="team-b").target_namespace == "team-b"
    assert ExperimentSettings(name="fmnist-tune").target_namespace == ""


def test_the_deadline_is_a_trials_time_per_round_plus_the_slack():
    """At most ceil(max / parallel) rounds of trials (Katib counts failed trials too)."""
    settings = _settings(max_trial_count=5, parallel_trial_count=2, trial_minutes=10)
    assert settings.deadline_seconds() == 3 * 600 + SEARCH_SLACK_SECONDS
    timed = _settings(max_trial_count=5, parallel_trial_count=2, trial_minutes=10,
                      kubernetes=KubernetesSettings(image=IMAGE, pvc_name="p",
                                                    active_deadline_seconds=120))
    assert timed.deadline_seconds() == 3 * 120 + SEARCH_SLACK_SECONDS
    assert _settings(trial_minutes=0).deadline_seconds() == 0.0


def test_the_tuning_settings_describe_the_experiment():
    tuning = TuningSettings(algorithm="random", max_trials=8, parallel_trials=4, epochs=3,
                            random_state=7, early_stopping=False, trial_minutes=20)
    base = TrainingConfig(learning_rate=0.01, epochs=20)
    settings = ExperimentSettings.from_tuning("fmnist-tune", "dropout", base, tuning,
                                              num_workers=2)
    assert (settings.algorithm, settings.algorithm_settings) == ("random", {"random_state": 7})
    assert (settings.max_trial_count, settings.parallel_trial_count) == (8, 4)
    assert settings.early_stopping is None and settings.num_workers == 2
    # Trials keep the given hyperparameters but train for the search's epochs.
    assert settings.training_config().learning_rate == 0.01
    assert settings.training_config().epochs == 3
    assert settings.training_config().model_type == "dropout"
    stopping = ExperimentSettings.from_tuning("fmnist-tune", "dropout", base, TuningSettings())
    assert stopping.early_stopping == EarlyStopping()
    assert stopping.algorithm_settings == {}
