"""tuning.max_parameters: a configuration over the budget is never trained, on either backend,
and the search learns from it (katib/parameter_budget.py)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from fmnist_kfp.errors import TuningError
from fmnist_kfp.katib.optuna_search import LocalTuner
from fmnist_kfp.katib.parameter_budget import budget_problems, within_budget
from fmnist_kfp.katib.report import render_html
from fmnist_kfp.katib.results import OVER_PARAMETER_BUDGET, SUCCEEDED, TuningResult
from fmnist_kfp.kfp_components.tune.step import experiment_settings, tuning_problems
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.tuning.experiment_settings import METRICS_FILTER, ExperimentSettings
from fmnist_kfp.tuning.search_space import Parameter, SearchSpace
from tests import ROOT
from tests.katib.test_katib_launcher import BEST, DATA_DIR, _launcher, _settings, _space
from tests.standins.katib import KatibStandIn, state, trial

# The dropout CNN of _settings with the searched filters at 64: three times the default budget.
OVER = trial("fmnist-tune-e5f6g7h8",
             {"learning_rate": "0.001", "batch_size": "32", "filters": "64",
              "dropout_rate": "0.3"}, {"val_accuracy": 0.0})


def test_a_search_whose_every_model_is_too_big_is_refused_before_any_trial():
    settings = ExperimentSettings(name="fmnist-tune", model_type="batchnorm")
    big = SearchSpace([Parameter.categorical("filters", [64, 128])])
    [problem] = budget_problems(settings, big)
    assert problem.startswith("every configuration of the search is over "
                              "tuning.max_parameters=100,000 (its smallest model has 306,522 ")
    assert budget_problems(settings, SearchSpace([Parameter.categorical("filters", [16, 64])])) \
        == []
    assert budget_problems(settings, SearchSpace([Parameter.integer("filters", 64, 96)]))
    unlimited = ExperimentSettings(name="fmnist-tune", model_type="batchnorm", max_parameters=0)
    assert budget_problems(unlimited, big) == []
    # The step's check before any work, for either backend: the default search (filters 16
    # or 32 under the budget) fits the default budget, not one under its smallest model's
    # 35,994.
    for backend in ("local", "kubernetes"):
        [problem] = tuning_problems({"max_parameters": 20_000}, "batchnorm", TrainingConfig(),
                                    backend)
        assert "its smallest model has 35,994 parameters" in problem
        assert tuning_problems({}, "batchnorm", TrainingConfig(), backend) == []
    assert "max_parameters must be 0 (no budget) or more, got -1" in " ".join(
        tuning_problems({"max_parameters": -1}, "basic", TrainingConfig(), "local"))


def test_the_search_holds_only_the_sizes_the_budget_lets_train():
    """No trial is spent on a width that never fits: issue 42's measured search on bec452c
    spent 2 of its 12 trials on filters=64 (306,522 parameters under a 100k budget)."""
    def filters(tuning: dict, model_type: str = "batchnorm") -> tuple:
        _, space = experiment_settings("fmnist-tune", model_type, TrainingConfig(), tuning)
        return space.get("filters").values

    assert filters({}) == (16, 32)  # 35,994 and 98,522 parameters; 64 is over 100k
    assert filters({"max_parameters": 0}) == (16, 32, 64)  # no budget, nothing dropped
    assert filters({"max_parameters": 50_000}, "dropout") == (16,)
    # None fits: the space stays whole, and the step's check names the problem.
    assert filters({"max_parameters": 20_000}) == (16, 32, 64)
    # Another size field searched: a width stays if it fits beside that field's smallest.
    settings = ExperimentSettings(name="fmnist-tune", model_type="basic")
    space = SearchSpace([Parameter.categorical("filters", [16, 32, 64]),
                         Parameter.categorical("dense_units", [64, 32])])
    assert within_budget(settings, space).get("filters").values == (16, 32)
    assert within_budget(settings, space).get("dense_units").values == (64, 32)
    narrow = ExperimentSettings(name="fmnist-tune", model_type="basic", max_parameters=90_000)
    # filters=32 fits only with 32 dense units (79,018), so both stay, and 64 dense units
    # stays for filters=16 (35,514).
    assert within_budget(narrow, space).get("filters").values == (16, 32)
    assert within_budget(narrow, space).get("dense_units").values == (64, 32)


def test_the_trainer_refuses_a_model_over_the_budget_before_tensorflow_starts(tmp_path):
    """What a Katib trial's trainer does: no training, the objective 0 in a line Katib's
    StdOut collector parses (with its timestamp), exit code 0 so that the trial succeeds and
    the suggestion service sees it: failed trials never reach it (kubeflow/katib v0.19.0
    pkg/suggestion/v1beta1/internal/trial.py lines 41-47)."""
    script = ("import sys\nfrom fmnist_kfp.training.trainer import main\n"
              "code = main(sys.argv[1:])\n"
              "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'\n"
              "sys.exit(code)\n")
    args = ["--data-dir", str(tmp_path / "none"), "--work-dir", str(tmp_path / "w"),
            "--export-dir", str(tmp_path / "w" / "1"), "--model-type", "batchnorm",
            "--filters", "64", "--max-parameters", "100000"]
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("not training: batchnorm with these hyperparameters has 306,522 "
                        "parameters, over the search's budget of 100,000 "
                        "(tuning.max_parameters)")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z epoch=0 epochs=\d+ val_accuracy=0\.0000",
                        lines[1])
    assert ("val_accuracy", "0.0000") in [m[:2] for m in re.findall(METRICS_FILTER, lines[1])]
    assert not (tmp_path / "w").exists()


def test_katib_trials_over_the_budget_are_marked_and_their_zero_is_no_objective(tmp_path):
    settings = _settings(tmp_path)
    with KatibStandIn([state("Succeeded", succeeded=2, best=BEST)], [BEST, OVER]) as standin:
        result = _launcher(standin).run(settings, _space(), DATA_DIR)
        [experiment] = standin.posts()
    command = experiment["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"][
        "Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--max-parameters") + 1] == "100000"
    by_name = {t.name: t for t in result.trials}
    over = by_name["fmnist-tune-e5f6g7h8"]
    assert (over.status, over.objective, over.parameter_count) == (
        OVER_PARAMETER_BUDGET, None, 305_322)
    assert by_name[result.best_trial].status == SUCCEEDED
    assert result.best_parameter_count == by_name[result.best_trial].parameter_count == 97_802
    values = result.as_dict()
    assert values["trial_counts"] == {SUCCEEDED: 1, OVER_PARAMETER_BUDGET: 1}
    assert values["best_parameter_count"] == 97_802
    assert TuningResult.from_dict(values).trials == result.trials
    report = render_html(result)  # the tuning report says it too
    assert "1 Succeeded, 1 OverParameterBudget" in report and "<td>305,322</td>" in report
    assert "(97,802 parameters).</p>" in report

    # Every trial over: Katib's optimal is a refused one, and there is no result to train with.
    with KatibStandIn([state("Succeeded", succeeded=1, best=OVER)], [OVER]) as standin:
        with pytest.raises(TuningError, match=r"every trial was over tuning.max_parameters="
                                              r"100,000 \(none trained\)"):
            _launcher(standin).run(_settings(tmp_path / "b"), _space(), DATA_DIR)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_local_search_prunes_a_model_over_the_budget_before_it_starts(synthetic_dataset,
                                                                           tmp_path):
    """Grid order: 64 filters first (over a 60k budget: never started, told to Optuna as
    pruned), then 8 (trained)."""
    out = io.StringIO()
    settings = ExperimentSettings(
        name="fmnist-tune-test", algorithm="grid", model_type="basic", parallel_trial_count=1,
        max_trial_count=2, max_failed_trial_count=0, max_parameters=60_000,
        base_config=TrainingConfig(epochs=1, batch_size=32, precision="float32",
                                   train_examples=256))
    space = SearchSpace([Parameter.categorical("filters", [64, 8])])
    tuner = LocalTuner(str(tmp_path / "trials"), out=out)
    result = tuner.run(settings, space, str(synthetic_dataset))
    over, trained = result.trials
    assert (over.status, over.parameters, over.epochs, over.objective) == (
        OVER_PARAMETER_BUDGET, {"filters": 64}, 0, None)
    assert over.parameter_count == 305_322 and "over max_parameters=60,000" in \
        over.metrics["error"]
    assert not (tmp_path / "trials" / over.name).exists()  # no trainer ever started
    assert trained.status == SUCCEEDED and result.best_trial == trained.name
    assert result.best_parameter_count == trained.parameter_count < 60_000
    assert f"trial {over.name}: OverParameterBudget" in out.getvalue()
    assert json.loads(json.dumps(result.as_dict()))["trial_counts"] == {
        SUCCEEDED: 1, OVER_PARAMETER_BUDGET: 1}
