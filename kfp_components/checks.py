"""Every check of a run's parameters, made before any work starts, in one place.

Each step declares its own checks in ``kfp_components/<step>/checks.py`` (a light module:
``parameter_problems(parameters, context)``); :func:`parameter_problems` runs the settings' own
rules, then every step's checks in the pipeline's order (:data:`STEP_CHECKS`), for the CLI
(``fmnist-kfp run``), the Python API (``pipelines.cluster_arguments``) and local runs alike. Every
problem is reported at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fmnist_kfp.kfp_components.deploy import checks as deploy_checks
from fmnist_kfp.kfp_components.ingest import checks as ingest_checks
from fmnist_kfp.kfp_components.train import checks as train_checks
from fmnist_kfp.kfp_components.tune import checks as tune_checks
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.platform import Platform


@dataclass(frozen=True)
class CheckContext:
    """What a step's checks may need beyond the parameters."""

    platform: Platform  # the images the step's pods run (the compiled ones)
    check_data: bool  # whether a local data directory is read on this machine
    settings_problems: list[str] = field(default_factory=list)  # the settings' own


Check = Callable[[PipelineParameters, CheckContext], list[str]]


# Folder → its ``checks.parameter_problems``, for the steps that declare checks, in the
# pipeline's order.
STEP_CHECKS: dict[str, Check] = {
    "ingest": ingest_checks.parameter_problems,
    "tune": tune_checks.parameter_problems,
    "train": train_checks.parameter_problems,
    "deploy": deploy_checks.parameter_problems,
}


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
    for check in STEP_CHECKS.values():
        problems += [p for p in check(parameters, context) if p not in problems]
    return list(dict.fromkeys(problems))
