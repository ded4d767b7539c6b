"""The pipeline's components, one folder each (kubeflow/pipelines-components' layout):
``component.py`` (the ``@dsl.component``), ``step.py`` (the step's logic, plain Python),
``checks.py`` (its checks of a run's parameters, where it has any), ``metadata.yaml`` and a
generated ``README.md``. Their tests are in the tree that mirrors the code: the steps together in
``tests/kfp_components/``, the modules a step calls under ``tests/<their folder>/``. Their
compiled YAML is in ``compiled/components/`` for other pipelines to load.

Nothing is imported until it is used: a pipeline pod imports only its step (KFP's runtime
``kfp.dsl`` cannot build components)."""

import contextlib
import functools
import importlib
import json
import os
import sys

from fmnist_kfp.errors import FmnistError

# Set by ``fmnist-kfp run --local`` to a file: see :func:`reports_errors_briefly`.
STEP_ERRORS_ENV = "FMNIST_STEP_ERRORS"

# Folder name → the component's function name.
FOLDERS = {
    "freshness": "freshness_window",
    "ingest": "ingest_fashion_mnist",
    "tune": "tune_hyperparameters",
    "train": "train_model",
    "promote": "promote_early",
    "select": "select_best_model",
    "deploy": "deploy_model",
    "predict": "predict_with_served_model",
    "batch_predict": "batch_predict",
}

__all__ = ["COMPONENTS", *FOLDERS.values()]


def lazy_component(package: str, function: str):
    """A component folder's module ``__getattr__``: ``function`` is imported from the folder's
    ``component.py`` on first use, so importing the folder (or its step) never builds it."""

    def __getattr__(name: str):
        if name == function:
            return getattr(importlib.import_module(f"{package}.component"), function)
        raise AttributeError(name)

    return __getattr__


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


def __getattr__(name: str):
    if name == "COMPONENTS":  # folder name → component
        return {folder: getattr(importlib.import_module(f"{__name__}.{folder}"), function)
                for folder, function in FOLDERS.items()}
    for folder, function in FOLDERS.items():
        if name == function:
            return getattr(importlib.import_module(f"{__name__}.{folder}"), function)
    raise AttributeError(name)
