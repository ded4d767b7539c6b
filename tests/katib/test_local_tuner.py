"""The local search: Katib's median-stop rule, the mapping of Katib's algorithms to Optuna,
bad input refused before any trial, and real searches whose trials are local training jobs."""

from __future__ import annotations

import io
import signal

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from fmnist_kfp.errors import TuningError, UserInputError
from fmnist_kfp.katib.median_stop import KatibMedianStopPruner
from fmnist_kfp.katib.optuna_search import LocalTuner, distributions, grid_points, make_sampler
from fmnist_kfp.katib.results import EARLY_STOPPED, SUCCEEDED, TuningResult
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.tuning.experiment_settings import EarlyStopping, ExperimentSettings
from fmnist_kfp.tuning.search_space import Parameter, SearchSpace
from fmnist_kfp.validation import validate_parameters
from tests import launcher_harness as harness

_LR = FloatDistribution(1e-5, 1e-1, log=True)


def _study(histories: list[list[float]], direction: str = "maximize") -> optuna.Study:
    """A study with one completed trial per history (values per epoch, steps from 1)."""
    study = optuna.create_study(direction=direction)
    for history in histories:
        study.add_trial(create_trial(
            params={"learning_rate": 1e-3}, distributions={"learning_rate": _LR},
            value=history[-1], intermediate_values=dict(enumerate(history, start=1)),
        ))
    return study


def _running(values: list[float]):
    return create_trial(params={"learning_rate": 1e-3}, distributions={"learning_rate": _LR},
                        state=TrialState.RUNNING,
                        intermediate_values=dict(enumerate(values, start=1)))


def test_median_stop_uses_katibs_rule():
    # Averages over the first 2 reports: 0.6, 0.7, 0.9 -> median 0.7, whatever came later.
    study = _study([[0.5, 0.7, 0.99], [0.6, 0.8, 0.8], [0.9, 0.9, 0.9]])
    pruner = KatibMedianStopPruner(min_trials_required=3, start_step=2)
    assert pruner.threshold(study) == pytest.approx(0.7)
    assert pruner.prune(study, _running([0.1, 0.69]))  # worse than 0.7 at its 2nd report
    assert not pruner.prune(study, _running([0.1, 0.71]))
    assert not pruner.prune(study, _running([0.1]))  # before start_step: never stopped
    assert pruner.prune(study, _running([0.8, 0.9, 0.65]))  # any report from start_step on


def test_median_stop_waits_for_enough_succeeded_trials_and_follows_the_direction():
    pruner = KatibMedianStopPruner(min_trials_required=3, start_step=1)
    assert pruner.threshold(_study([[0.5], [0.6]])) is None
    assert not pruner.prune(_study([[0.5], [0.6]]), _running([0.0]))
    losses = _study([[0.3], [0.4], [0.5]], direction="minimize")
    assert pruner.prune(losses, _running([0.45]))
    assert not pruner.prune(losses, _running([0.35]))


def test_katib_feasible_spaces_become_optuna_distributions():
    space = SearchSpace([
        Parameter.double("learning_rate", 1e-4, 3e-3, log=True),
        Parameter.double("dropout_rate", 0.2, 0.5, step=0.15),
        Parameter.integer("batch_size", 32, 256, step=32),
        Parameter.categorical("filters", [16, 32, 64]),
    ])
    found = distributions(space)
    assert found["learning_rate"].log and found["learning_rate"].low == 1e-4
    assert found["dropout_rate"].step == 0.15
    assert found["batch_size"].step == 32 and found["batch_size"].high == 256
    assert found["filters"].choices == (16, 32, 64)
    points = grid_points(space.without("learning_rate"))
    assert len(points) == 3 * 8 * 3 == space.without("learning_rate").grid_size()
    assert points[0] == {"dropout_rate": 0.2, "batch_size": 32, "filters": 16}
    assert {p["dropout_rate"] for p in points} == {0.2, 0.35, 0.5}


@pytest.mark.parametrize("algorithm,sampler,multivariate", [
    ("random", optuna.samplers.RandomSampler, None),
    ("grid", optuna.samplers.RandomSampler, None),  # grid points are queued trials
    ("tpe", optuna.samplers.TPESampler, False),
    ("multivariate-tpe", optuna.samplers.TPESampler, True),
])
def test_each_local_algorithm_has_its_optuna_sampler(algorithm, sampler, multivariate):
    settings = ExperimentSettings(name="fmnist-tune", algorithm=algorithm,
                                  algorithm_settings={"random_state": 3})
    made = make_sampler(settings)
    assert isinstance(made, sampler)
    if multivariate is not None:
        assert made._multivariate is multivariate
        # A third of the 12 trials explore at random; running trials count as scored
        # (constant liar) so the 3 parallel asks spread out.
        assert made._n_startup_trials == 4 and made._constant_liar


@pytest.mark.timeout(60)
def test_sigterm_stops_every_running_trials_workers_and_starts_no_other(tmp_path):
    """KFP terminates the tune step by SIGTERM: the search ends both running trials (each
    launcher kills its two workers and waits for them), starts none of the two left, says
    so, and exits 143 with no process of its own left behind. Stand-in workers: this is about
    process handling, not training."""
    process, lines = harness.start("tuner", tmp_path)
    seen: list[str] = []
    try:
        pids = harness.worker_pids(lines, 4, seen)
        assert {who.split("/")[0] for who in pids} == {"harness-search-000",
                                                        "harness-search-001"}
        process.send_signal(signal.SIGTERM)
        output = harness.finish(process, lines, seen)
    finally:
        if process.poll() is None:
            process.kill()
    log = "\n".join(output)
    assert process.returncode == 128 + signal.SIGTERM, log
    assert "[harness-search] terminated: stopped 2 running trial(s)" in log
    assert output[-1] == "left=[]", log
    assert all(harness.gone(pid) for pid in pids.values())
    assert "harness-search-002" not in log and "harness-search-003" not in log


def _tuner_error(tmp_path, settings: ExperimentSettings, space: SearchSpace | None = None):
    work = tmp_path / "trials"
    with pytest.raises(UserInputError) as raised:
        LocalTuner(str(work), out=io.StringIO()).run(
            settings, space or SearchSpace.default(settings.algorithm, settings.model_type),
            str(tmp_path / "data"))
    assert not work.exists()  # refused before any trial started
    return str(raised.value)


@pytest.mark.parametrize("overrides,space,expected", [
    ({}, SearchSpace([Parameter.double("learning_rate", 1e-3, 1e-3)]), "is empty"),
    ({}, SearchSpace([Parameter.double("learning_rate", 1e-2, 1e-3)]), "is inverted"),
    ({"algorithm": "hyperopt"}, None, "unknown algorithm 'hyperopt'"),
    ({"max_trial_count": 2, "parallel_trial_count": 3}, None,
     "max_trial_count (2) is below parallel_trial_count (3)"),
    ({"objective_metric": "f1_score"}, None, "does not report objective metric 'f1_score'"),
    ({"algorithm": "bayesianoptimization"}, None, "runs on Katib only"),
    ({"early_stopping": EarlyStopping(start_step=10)}, None, "start_step 10 is not below"),
])
def test_bad_searches_fail_before_any_trial(tmp_path, overrides, space, expected):
    settings = ExperimentSettings(name="fmnist-tune", **overrides)
    assert expected in _tuner_error(tmp_path, settings, space)


def test_bad_tuning_parameters_fail_when_the_pipeline_is_validated():
    def problems(tuning: dict) -> str:
        parameters = PipelineParameters(tune=True, tuning=tuning, model_types=["batchnorm"])
        with pytest.raises(UserInputError) as raised:
            validate_parameters(parameters, check_data=False)
        return str(raised.value)

    assert "unknown tuning settings ['trials']" in problems({"trials": 4})
    assert "unknown algorithm 'annealing'" in problems({"algorithm": "annealing"})
    assert "below parallel_trial_count" in problems({"max_trials": 1, "parallel_trials": 2})
    assert "max_trials must be an integer, got '12'" in problems({"max_trials": "12"})
    assert "runs on Katib only" in problems({"algorithm": "cmaes"})
    validate_parameters(PipelineParameters(tune=True, model_types=["batchnorm"],
                                           tuning={"algorithm": "random", "max_trials": 4}),
                        check_data=False)


def _settings(**overrides) -> ExperimentSettings:
    values = dict(
        name="fmnist-tune-test", algorithm="grid", model_type="basic",
        parallel_trial_count=1, max_trial_count=2, max_failed_trial_count=0,
        additional_metrics=("val_loss",),
        base_config=TrainingConfig(epochs=3, batch_size=32, precision="float32"),
    )
    values.update(overrides)
    return ExperimentSettings(**values)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_search_stops_the_worse_trial_early(synthetic_dataset, tmp_path):
    """Grid order: a sane learning rate first, then one far too small. Once the first trial
    has succeeded (min_trials_required=1), the second is worse than its epoch-1 accuracy at
    its own first report (start_step=1) and is stopped there, as Katib would."""
    out = io.StringIO()
    space = SearchSpace([Parameter.categorical("learning_rate", [3e-3, 1e-6])])
    settings = _settings(early_stopping=EarlyStopping(min_trials_required=1, start_step=1))
    result = LocalTuner(str(tmp_path / "trials"), out=out).run(
        settings, space, str(synthetic_dataset))
    good, bad = result.trials
    assert (good.status, good.epochs, good.parameters) == (SUCCEEDED, 3,
                                                            {"learning_rate": 3e-3})
    assert (bad.status, bad.epochs) == (EARLY_STOPPED, 1)
    assert bad.objective < good.objective
    assert result.best_trial == good.name and result.best_parameters == {"learning_rate": 3e-3}
    assert result.best_objective == good.objective > 0.5
    assert result.total_epochs == 4
    assert "val_loss" in good.metrics
    config = result.training_config(epochs=12)
    assert (config.learning_rate, config.epochs, config.model_type) == (3e-3, 12, "basic")
    log = out.getvalue()
    assert f"trial {bad.name}: EarlyStopped" in log and "best" in log
    assert (tmp_path / "trials" / good.name / "1" / "saved_model.pb").exists()
    restored = TuningResult.from_dict(result.as_dict())
    assert restored.trials[1].status == EARLY_STOPPED


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_search_fails_when_more_trials_fail_than_allowed(synthetic_dataset, tmp_path):
    """More training examples than the dataset has: the trainer exits with an error, the
    trial fails, and with max_failed_trial_count=0 the search fails at once naming it."""
    settings = _settings(algorithm="random", max_trial_count=3,
                         base_config=TrainingConfig(epochs=1, train_examples=1_000_000))
    space = SearchSpace([Parameter.double("learning_rate", 1e-4, 1e-2, log=True)])
    with pytest.raises(TuningError) as raised:
        LocalTuner(str(tmp_path / "trials"), out=io.StringIO()).run(
            settings, space, str(synthetic_dataset))
    message = str(raised.value)
    assert "1 trials failed, more than max_failed_trial_count=0" in message
    assert "fmnist-tune-test-000" in message and "exit code 1" in message
    assert not (tmp_path / "trials" / "fmnist-tune-test-001").exists()  # none started after
