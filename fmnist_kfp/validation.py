"""Every check of a run's parameters, made before any work starts.

The settings check their own rules; this adds what needs the layers below them: the search
(Katib's rules, on either backend), the serving manifests, the trial and TFJob pods, and a
local data directory's files. Every problem is reported at once.
"""

from __future__ import annotations

import os

from fmnist.dataset.official import OFFICIAL_FILES
from fmnist.errors import UserInputError
from fmnist.settings.data import DATA_DIR_ENV, TFDS_SOURCE
from fmnist.settings.pipeline import PipelineParameters
from pipelines.arguments import parameter_problems as pipeline_problems


def parameter_problems(parameters: PipelineParameters,
                       check_data: bool | None = None) -> list[str]:
    """The checks a Kubeflow run gets (:func:`pipelines.arguments.parameter_problems`), and
    on this machine the data directory's files."""
    problems = pipeline_problems(parameters)
    if check_data if check_data is not None else parameters.backend == "local":
        # Here, not at the top: `compile` uses writable_directory in a base install (no numpy).
        from fmnist.dataset.sources import resolve_source

        # A cluster reads its own storage; this machine's directories mean nothing there.
        problems += data_problems(resolve_source(parameters.data_source))
    return list(dict.fromkeys(problems))


def validate_parameters(parameters: PipelineParameters,
                        check_data: bool | None = None) -> PipelineParameters:
    """Raises ``UserInputError`` naming every bad parameter."""
    problems = parameter_problems(parameters, check_data)
    if problems:
        raise UserInputError("invalid pipeline parameters:\n  - " + "\n  - ".join(problems))
    return parameters


def data_problems(source: str) -> list[str]:
    """A local data directory must exist and hold the four files (their checksums are
    verified on ingest)."""
    if source == TFDS_SOURCE or "://" in source:
        return []  # remote sources are checked by the ingestion step itself
    if not os.path.isdir(source):
        return [
            f"data directory {source!r} does not exist (from the data_source parameter or "
            f"${DATA_DIR_ENV}); point it at a directory holding the four official IDX .gz files"
        ]
    missing = [f.name for f in OFFICIAL_FILES if not os.path.isfile(os.path.join(source, f.name))]
    if missing:
        return [f"data directory {source!r} lacks {', '.join(missing)}"]
    return []


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
