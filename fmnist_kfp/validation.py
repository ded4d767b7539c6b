"""The CLI's checks of a run's parameters and of the paths it writes, before any work starts.

A run's parameters are checked by :func:`fmnist_kfp.kfp_components.checks.parameter_problems`, the
one function that runs every step's checks (on this machine, the data directory's files too).
"""

from __future__ import annotations

import os

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.checks import parameter_problems
from fmnist_kfp.settings.pipeline import PipelineParameters


def validate_parameters(parameters: PipelineParameters,
                        check_data: bool | None = None) -> PipelineParameters:
    """Raises ``UserInputError`` naming every bad parameter (``check_data``, default: a local
    run, also reads the data directory)."""
    problems = parameter_problems(parameters, check_data=check_data)
    if problems:
        raise UserInputError("invalid pipeline parameters:\n  - " + "\n  - ".join(problems))
    return parameters


def writable_directory(path: str, what: str) -> str:
    """``path``, made if missing, when it is a local directory; ``UserInputError`` naming
    ``what`` (a flag, a parameter) when it cannot be one: a file in the way, no permission.
    URIs pass as they are: their filesystem answers for them."""
    if "://" not in path:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as error:
            raise UserInputError(f"{what} {path!r} cannot be made a directory: "
                                 f"{error.strerror or error}") from None
    return path
