"""The ingest step's checks of a run's parameters (see :mod:`fmnist_kfp.kfp_components.checks`): on
this machine, a local data directory must exist and hold the four official files (their checksums
are verified as they are ingested). A cluster reads its own storage: nothing to check here."""

from __future__ import annotations

import os

from fmnist_kfp.dataset.official import OFFICIAL_FILES
from fmnist_kfp.settings.data import DATA_DIR_ENV, TFDS_SOURCE
from fmnist_kfp.settings.pipeline import PipelineParameters


def parameter_problems(parameters: PipelineParameters, context) -> list[str]:
    if not context.check_data:
        return []
    # Here, not at the top: `compile` runs these checks in a base install (no numpy).
    from fmnist_kfp.dataset.sources import resolve_source

    return data_problems(resolve_source(parameters.data_source))


def data_problems(source: str) -> list[str]:
    """A local data directory's problems (``fmnist-kfp ingest`` checks its own with this)."""
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
