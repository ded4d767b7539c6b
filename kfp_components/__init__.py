"""The pipeline's components, one folder each (kubeflow/pipelines-components' layout):
``component.py`` (the ``@dsl.component``), ``step.py`` (the step's logic, plain Python),
``checks.py`` (its checks of a run's parameters, where it has any), ``metadata.yaml`` and a
generated ``README.md``. Their tests are in the tree that mirrors the code: the steps together in
``tests/kfp_components/``, the modules a step calls under ``tests/<their folder>/``. Their
compiled YAML is in ``compiled/components/`` for other pipelines to load.

Every component, built, is in :mod:`.registry` (``COMPONENTS``): this package builds none, since
a pipeline pod imports it for its step and KFP's runtime ``kfp.dsl`` cannot build components."""

import contextlib
import functools
import json
import os
import sys

from fmnist_kfp.errors import FmnistError

# Set by ``fmnist-kfp run --local`` to a file: see :func:`reports_errors_briefly`.
STEP_ERRORS_ENV = "FMNIST_STEP_ERRORS"


def reports_errors_briefly(step):
    """Decorates a step's entry point. Run by ``fmnist-kfp run --local``
    (``$FMNIST_STEP_ERRORS`` names a file), the step ends on an error of ours
    (:class:`fmnist_kfp.errors.FmnistError`, whose message says what to do) with
    ``error: <message>`` and the error's exit code instead of a traceback, and the error is
    appended to that file for the run to end with it. Any other exception keeps its traceback:
    that is a bug. Without the variable (on Kubeflow, in tests, from the Python API) every error
    propagates unchanged."""

    @functools.wraps(step)
    def run(*args, **kwargs):
        try:
            return step(*args, **kwargs)
        except FmnistError as error:
            path = os.environ.get(STEP_ERRORS_ENV, "")
            if not path:
                raise
            print(f"error: {error}", file=sys.stderr, flush=True)
            record = {"error": type(error).__name__, "message": str(error),
                      "exit_code": error.exit_code}
            with contextlib.suppress(OSError), open(path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            raise SystemExit(error.exit_code) from None

    return run

