"""What a Katib Experiment searches: the trainer's hyperparameters and the search algorithm.

A :class:`SearchSpace` holds one :class:`Parameter` per :class:`TrainingConfig` field it tunes;
every other field stays at the experiment's base configuration. ``problems()`` names every
mistake before a manifest exists: ranges Katib or the trainer would reject, and combinations a
suggestion service accepts but then mishandles (a grid over a double without ``step``, a
log-uniform range under an algorithm that ignores it, ``dropout_rate`` on a model without
dropout).

The per-algorithm rules follow Katib v0.19's suggestion services, as its ``katib-config`` maps
them: ``random`` and ``tpe`` run on hyperopt, ``grid`` and ``multivariate-tpe`` on Optuna,
``cmaes`` on Goptuna and ``bayesianoptimization`` on scikit-optimize. Two quirks are accepted
rather than refused: Goptuna (cmaes) samples every range uniformly whatever its distribution,
and scikit-optimize samples every double log-uniformly (hence its low > 0 rule).
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from fmnist_kfp.settings.training import TrainingConfig

PARAMETER_TYPES = ("double", "int", "categorical")
# Katib's distributions; "" leaves Katib's default (uniform).
DISTRIBUTIONS = ("", "uniform", "logUniform", "normal", "logNormal")
MODEL_TYPES_WITH_DROPOUT = ("dropout",)
_KIND_NAMES = {float: "float", int: "integer", str: "string", bool: "boolean"}




def format_value(value: Any) -> str:
    """A value as Katib carries it (feasible spaces and assignments are strings) and as the
    trainer's flag parses it back: ``repr`` keeps every digit of a float."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass(frozen=True)
class Parameter:
    """One searched hyperparameter, named like its :class:`TrainingConfig` field.

    ``double`` and ``int`` take ``low``/``high`` (both inclusive) and an optional ``step``;
    ``categorical`` takes ``values``. Build them with :meth:`double`, :meth:`integer` and
    :meth:`categorical`.
    """

    name: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    values: tuple[Any, ...] = ()
    distribution: str = ""

    @classmethod
    def double(
        cls, name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> Parameter:
        return cls(name, "double", low, high, step, distribution="logUniform" if log else "")

    @classmethod
    def integer(
        cls, name: str, low: int, high: int, step: int | None = None, log: bool = False
    ) -> Parameter:
        return cls(name, "int", low, high, step, distribution="logUniform" if log else "")

    @classmethod
    def categorical(cls, name: str, values: list[Any] | tuple[Any, ...]) -> Parameter:
        return cls(name, "categorical", values=tuple(values))

    @property
    def katib_values(self) -> list[str]:
        """The categorical list as Katib holds it: strings."""
        return [format_value(v) for v in self.values]

    def problems(self) -> list[str]:
        """Every problem with this parameter on its own, each with the fix."""
        types = {name: spec.kind for name, spec in TrainingConfig.specs().items()}
        if self.name not in types:
            # The validation split trials score on is the dataset's (ingestion's
            # validation_examples), the same for every trial: no trainer flag changes it.
            return [f"unknown hyperparameter {self.name!r}: search one of the trainer's "
                    f"TrainingConfig fields ({', '.join(sorted(types))})"]
        if self.type not in PARAMETER_TYPES:
            return [f"{self.name}: unknown parameter type {self.type!r}; choose one of "
                    f"{', '.join(PARAMETER_TYPES)}"]
        if self.distribution not in DISTRIBUTIONS:
            return [f"{self.name}: unknown distribution {self.distribution!r}; choose one of "
                    f"{', '.join(d for d in DISTRIBUTIONS if d)} (or leave it empty: uniform)"]
        kind = types[self.name]
        if self.type == "categorical":
            return self._categorical_problems(kind)
        return self._range_problems(kind)

    def _categorical_problems(self, kind: builtins.type) -> list[str]:
        problems = []
        if self.low is not None or self.high is not None or self.step is not None:
            problems.append(f"{self.name}: a categorical parameter takes values, not "
                            "low/high/step; drop them or make it a double or int range")
        if self.distribution:
            problems.append(f"{self.name}: a categorical parameter has no distribution")
        if not self.values:
            return problems + [f"{self.name}: the categorical list is empty; give at least "
                               "one value"]
        strings = self.katib_values
        duplicates = sorted({s for s in strings if strings.count(s) > 1})
        if duplicates:
            problems.append(f"{self.name}: duplicate categorical values {duplicates}; list "
                            "each value once")
        for value in self.values:
            problems += _value_problems(self.name, kind, value)
        return problems

    def _range_problems(self, kind: builtins.type) -> list[str]:
        name = self.name
        if self.values:
            return [f"{name}: a {self.type} parameter takes low/high, not values; drop values "
                    "or make it categorical"]
        if kind is not (float if self.type == "double" else int):
            wanted = {float: "a double", int: "an int"}.get(kind)
            fix = f"use {wanted} or categorical parameter" if wanted else \
                "use a categorical parameter"
            return [f"{name} takes {_KIND_NAMES[kind]} values, not a {self.type} range: {fix}"]
        if self.low is None or self.high is None:
            return [f"{name}: a {self.type} range needs both low and high"]
        problems = []
        bounds = {"low": self.low, "high": self.high}
        if self.step is not None:
            bounds["step"] = self.step
        for label, value in bounds.items():
            number_types = (int,) if self.type == "int" else (int, float)
            if isinstance(value, bool) or not isinstance(value, number_types) or (
                isinstance(value, float) and not math.isfinite(value)
            ):
                problems.append(f"{name}: {label} must be a finite "
                                f"{'integer' if self.type == 'int' else 'number'}, "
                                f"got {value!r}")
        if problems:
            return problems
        if self.low >= self.high:
            problems.append(
                f"{name}: the range [{self.low}, {self.high}] is "
                f"{'empty' if self.low == self.high else 'inverted'}; give low < high (to fix "
                "the value instead, leave it out of the search space and set it in the base "
                "configuration)"
            )
        if self.step is not None:
            if self.step <= 0:
                problems.append(f"{name}: step must be positive, got {self.step!r}")
            elif self.low < self.high and self.step > self.high - self.low:
                problems.append(f"{name}: step {self.step} is wider than the range "
                                f"[{self.low}, {self.high}], so only {self.low} would be tried; "
                                "use a smaller step")
        if self.distribution in ("logUniform", "logNormal") and self.low <= 0:
            problems.append(f"{name}: a {self.distribution} range needs low > 0, got "
                            f"{self.low!r}")
        for value in (self.low, self.high):
            problems += _value_problems(name, kind, value)
        return problems

    def bounds(self) -> tuple[float, float]:
        """``(low, high)`` of a range parameter (``problems()`` holds that it has both)."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.name}: a {self.type} range needs both low and high")
        return self.low, self.high

    def grid_points(self) -> list[Any]:
        """The values Katib's grid tries for this parameter (its Optuna service expands
        ``range(low, high + 1, step)`` for ints, ``arange(low, high + step, step)`` minus any
        value past ``high`` for doubles); empty where grid cannot enumerate it."""
        if self.type == "categorical":
            return list(self.values)
        low, high = self.bounds()
        if self.type == "int":
            return list(range(int(low), int(high) + 1, int(self.step or 1)))
        if not self.step:
            return []
        count = math.ceil((high + self.step - low) / self.step)
        if low + (count - 1) * self.step > high:
            count -= 1
        return [round(low + i * self.step, 12) for i in range(count)]

    def grid_values(self) -> int:
        """How many values Katib's grid tries for this parameter (0: it cannot)."""
        return len(self.grid_points())

def _value_problems(name: str, kind: type, value: Any) -> list[str]:
    """What the trainer would reject: the string Katib substitutes, parsed as the trainer's
    flag parses it, then validated by :class:`TrainingConfig` with every other field at its
    (valid) default."""
    text = format_value(value)
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            parsed: Any = text.lower() in ("true", "1", "yes")
        else:
            parsed = kind(text)
    except ValueError:
        return [f"{name}: {value!r} is not a valid {_KIND_NAMES[kind]} (the trainer parses "
                f"--{name.replace('_', '-')} {text})"]
    return [f"{name}: {p}" for p in replace(TrainingConfig(), **{name: parsed}).problems()]


# Every setting each suggestion service accepts, with its check (None: valid). Unknown settings
# are refused here even where a service would silently ignore them: a typo must not pass.
def _int_at_least(minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            ok = int(value) >= minimum
        except ValueError:
            ok = False
        return None if ok else f"must be an integer >= {minimum}"

    return check


def _float_in(low: float, high: float, low_open: bool = True) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = float(value)
            ok = (number > low if low_open else number >= low) and number < high
        except ValueError:
            ok = False
        return None if ok else f"must be a number in {'(' if low_open else '['}{low}, {high})"

    return check


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


ALGORITHM_SETTINGS: dict[str, dict[str, Callable[[str], str | None]]] = {
    "random": {"random_state": _int_at_least(0)},
    "grid": {"random_state": _int_at_least(0)},
    "tpe": {
        "gamma": _float_in(0, 1),
        "prior_weight": _float_in(0, math.inf),
        "n_EI_candidates": _int_at_least(1),
        "random_state": _int_at_least(0),
    },
    "multivariate-tpe": {
        "n_startup_trials": _int_at_least(0),
        "n_ei_candidates": _int_at_least(0),
        "random_state": _int_at_least(0),
    },
    "cmaes": {
        "random_state": _int_at_least(0),
        "sigma": _float_in(0, math.inf),
        "restart_strategy": _one_of("none", "ipop", "bipop"),
    },
    "bayesianoptimization": {
        "base_estimator": _one_of("GP", "RF", "ET", "GBRT"),
        "n_initial_points": _int_at_least(0),
        "acq_func": _one_of("gp_hedge", "LCB", "EI", "PI", "EIps", "PIps"),
        "acq_optimizer": _one_of("auto", "sampling", "lbfgs"),
        "random_state": _int_at_least(0),
    },
}
ALGORITHMS = tuple(ALGORITHM_SETTINGS)


def algorithm_problems(algorithm: str, settings: dict[str, Any]) -> list[str]:
    """Every problem with the algorithm's name and settings, each with the fix."""
    if algorithm not in ALGORITHM_SETTINGS:
        return [f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}"]
    known = ALGORITHM_SETTINGS[algorithm]
    problems = []
    for name, value in settings.items():
        if name not in known:
            accepted = ", ".join(known) or "none"
            problems.append(f"unknown setting {name!r} for algorithm {algorithm}; it accepts "
                            f"{accepted}")
            continue
        error = known[name](format_value(value))
        if error:
            problems.append(f"algorithm setting {name}={value!r} {error}")
    return problems


@dataclass
class SearchSpace:
    """The searched hyperparameters; every other TrainingConfig field stays fixed."""

    parameters: list[Parameter] = field(default_factory=list)

    @classmethod
    def default(cls, algorithm: str = "tpe", model_type: str = "batchnorm") -> SearchSpace:
        """Ranges that suit Fashion-MNIST's CNNs, shaped for what ``algorithm`` can search.

        Epochs stay fixed (the base configuration's): with ``latest`` as the metric strategy a
        longer run wins by default, which would spend the trials learning that.
        ``dropout_rate`` is searched only for a model with a dropout layer.
        """
        batch = Parameter.categorical("batch_size", [32, 64, 128, 256])
        # Around the recipe's peak of 4e-3 (after a warm-up, bench/results/ablation.md).
        learning_rate = Parameter.double("learning_rate", 3e-4, 1e-2, log=True)
        dropout = Parameter.double("dropout_rate", 0.1, 0.6)
        if algorithm == "grid":
            # Katib's grid steps linearly and needs a step for every double: list the
            # learning rates, log-spaced, instead.
            learning_rate = Parameter.categorical("learning_rate", [3e-4, 1e-3, 4e-3, 1e-2])
            dropout = Parameter.double("dropout_rate", 0.2, 0.5, step=0.15)
        if algorithm == "cmaes":
            # CMA-ES needs two or more continuous dimensions (categorical ones do not count),
            # and Katib's Goptuna service ignores distributions: say uniform, as it samples.
            batch = Parameter.integer("batch_size", 32, 256, step=32)
            learning_rate = Parameter.double("learning_rate", 3e-4, 1e-2)
        # Multiples of 16: oneDNN's bfloat16 kernels fall off a cliff between them (the batch
        # norm CNN at filters=24 trains 3.5x slower than at 32, bench/README.md). The tune step
        # drops those over the parameter budget (katib/parameter_budget.py, within_budget).
        parameters = [learning_rate, batch, Parameter.categorical("filters", [16, 32, 64])]
        if model_type in MODEL_TYPES_WITH_DROPOUT:
            parameters.append(dropout)
        return cls(parameters)

    def with_parameter(self, parameter: Parameter) -> SearchSpace:
        """A copy with ``parameter`` added, or in place of the one of the same name."""
        if parameter.name not in self.names:
            return SearchSpace([*self.parameters, parameter])
        return SearchSpace([parameter if p.name == parameter.name else p
                            for p in self.parameters])

    def without(self, name: str) -> SearchSpace:
        return SearchSpace([p for p in self.parameters if p.name != name])

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def get(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)

    def grid_size(self) -> int:
        """How many combinations Katib's grid enumerates (0 if it cannot)."""
        return math.prod(p.grid_values() for p in self.parameters) if self.parameters else 0

    def problems(self, algorithm: str | None = None, model_type: str | None = None) -> list[str]:
        """Every problem, each with the fix; with ``algorithm`` also what that algorithm's
        suggestion service needs, with ``model_type`` (the base model) what the model uses."""
        if not self.parameters:
            return ["the search space is empty; search at least one hyperparameter "
                    "(SearchSpace.default() is a start)"]
        problems = []
        names = self.names
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            problems.append(f"hyperparameters searched twice: {duplicates}; keep one "
                            "parameter per name")
        for parameter in self.parameters:
            problems += parameter.problems()
        if model_type is not None:
            problems += self._model_problems(model_type)
        if algorithm is not None:
            problems += self._algorithm_problems(algorithm)
        return problems

    def _model_problems(self, model_type: str) -> list[str]:
        model = self.get("model_type")
        model_types = [str(v) for v in model.values] if model else [model_type]
        if self.get("dropout_rate") and not set(model_types) & set(MODEL_TYPES_WITH_DROPOUT):
            return [f"dropout_rate is searched but model type {', '.join(model_types)} has no "
                    "dropout layer, so every value trains the same model; use model_type "
                    "'dropout' or drop dropout_rate from the search space"]
        return []

    def _algorithm_problems(self, algorithm: str) -> list[str]:
        problems = []
        if algorithm == "grid":
            for p in self.parameters:
                if p.type == "double" and p.step is None:
                    problems.append(
                        f"algorithm grid needs a step for every double parameter (Katib's grid "
                        f"enumerates low..high by step): give {p.name} a step, or list its "
                        "values as a categorical parameter"
                    )
                if p.distribution:
                    problems.append(
                        f"algorithm grid ignores {p.name}'s {p.distribution} distribution (it "
                        "steps linearly): list the values you want as a categorical parameter"
                    )
        if algorithm == "cmaes":
            continuous = [p.name for p in self.parameters if p.type in ("double", "int")]
            if len(continuous) < 2:
                problems.append(
                    "algorithm cmaes needs two or more double or int parameters (categorical "
                    f"ones do not count); this space has {continuous or 'none'}: search "
                    "another range or choose tpe"
                )
        if algorithm == "bayesianoptimization":
            for p in self.parameters:
                low = p.low
                if p.type == "double" and isinstance(low, int | float) and low <= 0:
                    problems.append(
                        f"algorithm bayesianoptimization samples every double log-uniformly "
                        f"(Katib's scikit-optimize service), so {p.name} needs low > 0, got "
                        f"{low!r}"
                    )
        return problems

    def validate(self, algorithm: str | None = None,
                 model_type: str | None = None) -> SearchSpace:
        from fmnist_kfp.errors import UserInputError

        problems = self.problems(algorithm, model_type)
        if problems:
            raise UserInputError("invalid search space: " + "; ".join(problems))
        return self
