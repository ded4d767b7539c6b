"""One searched hyperparameter, for either backend: values as Katib carries them (strings the
trainer parses back exactly), every problem with its fix, and the points Katib's grid tries."""

from __future__ import annotations

from fmnist_kfp.tuning.search_space import Parameter, format_value


def test_values_travel_as_strings_the_trainer_parses_back():
    assert format_value(0.1 + 0.2) == "0.30000000000000004"  # every digit
    assert format_value(True) == "true" and format_value(64) == "64"
    assert Parameter.categorical("batch_size", [32, 64]).katib_values == ["32", "64"]


def test_a_good_parameter_has_no_problems():
    assert Parameter.double("learning_rate", 1e-4, 1e-2, log=True).problems() == []
    assert Parameter.integer("batch_size", 32, 256, step=32).problems() == []
    assert Parameter.categorical("augment", [True, False]).problems() == []


def test_each_problem_names_its_fix():
    [unknown] = Parameter.double("learning_rat", 0.1, 0.2).problems()
    assert "unknown hyperparameter 'learning_rat'" in unknown and "learning_rate" in unknown
    [inverted] = Parameter.double("learning_rate", 0.2, 0.1).problems()
    assert "is inverted; give low < high" in inverted
    [wide] = Parameter.integer("batch_size", 32, 64, step=64).problems()
    assert "wider than the range" in wide
    log = Parameter.double("learning_rate", 0.0, 0.1, log=True).problems()
    assert any("a logUniform range needs low > 0" in problem for problem in log)
    [duplicate] = Parameter.categorical("batch_size", [32, 32]).problems()
    assert "duplicate categorical values ['32']" in duplicate
    [kind] = Parameter.double("batch_size", 1.0, 2.0).problems()
    assert "takes integer values, not a double range" in kind


def test_the_grid_tries_what_katib_expands():
    assert Parameter.integer("batch_size", 32, 128, step=32).grid_points() == [32, 64, 96, 128]
    assert Parameter.double("learning_rate", 0.1, 0.35, step=0.1).grid_points() == [
        0.1, 0.2, 0.3]
    assert Parameter.double("learning_rate", 0.1, 0.3).grid_values() == 0  # no step: no grid
    assert Parameter.categorical("augment", [True, False]).grid_values() == 2
