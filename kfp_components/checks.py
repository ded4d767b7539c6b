"""Every check of a run's parameters, made before any work starts, in one place.

Each step declares its own checks in ``kfp_components/<step>/checks.py`` (a light module:
``parameter_problems(parameters, context)``); :func:`parameter_problems` runs the settings' own
rules, then every step's checks in the pipeline's order (the folders of
:data:`kfp_components.FOLDERS`, the one registry of steps), for the CLI (``fmnist-kfp run``), the
Python API (``pipelines.cluster_arguments``) and local runs alike. Every problem is reported at
once.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

from fmnist_kfp.kfp_components import FOLDERS
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.platform import Platform


@dataclass(frozen=True)
class CheckContext:
    """What a step's checks may need beyond the parameters."""

    platform: Platform  # the images the step's pods run (the compiled ones)
    check_data: bool  # whether a local data directory is read on this machine
    settings_problems: list[str] = field(default_factory=list)  # the settings' own


Check = Callable[[PipelineParameters, CheckContext], list[str]]


def step_checks() -> dict[str, Check]:
    """Folder → its ``checks.parameter_problems``, for the steps that declare checks."""
    found = {}
    for folder in FOLDERS:
        name = f"fmnist_kfp.kfp_components.{folder}.checks"
        if importlib.util.find_spec(name) is not None:
            found[folder] = importlib.import_module(name).parameter_problems
    return found


def parameter_problems(parameters: PipelineParameters, platform: Platform | None = None,
                       check_data: bool | None = None) -> list[str]:
    """Everything wrong with a run's parameters that can be known before it starts: the
    settings' rules, then each step's (the search's, the TFJob pods', the serving manifests',
    and on this machine — ``check_data``, default: a local run — the data directory's files).
    ``platform``: the images, default the compiled ones (``$FMNIST_COMPONENT_IMAGE``)."""
    problems = parameters.problems()
    context = CheckContext(
        platform=platform or Platform.from_env(),
        check_data=parameters.backend == "local" if check_data is None else check_data,
        settings_problems=list(problems))
    for check in step_checks().values():
        problems += [p for p in check(parameters, context) if p not in problems]
    return list(dict.fromkeys(problems))
