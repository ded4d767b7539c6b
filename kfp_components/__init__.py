"""The pipeline's components, one folder each (kubeflow/pipelines-components' layout):
``component.py`` (the ``@dsl.component``), ``step.py`` (the step's logic, plain Python),
``checks.py`` (its checks of a run's parameters, where it has any), ``metadata.yaml`` and a
generated ``README.md``. Their tests are in the tree that mirrors the code: the steps together in
``tests/kfp_components/``, the modules a step calls under ``tests/<their folder>/``. Their
compiled YAML is in ``compiled/components/`` for other pipelines to load.

Nothing is imported until it is used: a pipeline pod imports only its step (KFP's runtime
``kfp.dsl`` cannot build components)."""

import contextlib
import importlib
import json
import os
import sys

# Set by ``fmnist-kfp run --local`` to a file: see :func:`report_errors_briefly`.
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


def report_errors_briefly() -> None:
    """In a step that ``fmnist-kfp run --local`` runs (``$FMNIST_STEP_ERRORS`` names a file),
    an error of :mod:`fmnist_kfp.errors` ends the step with ``error: <message>`` instead of a
    traceback (its message says what to do) and is appended to that file, for the run to end
    with it. Any other exception keeps its traceback: that is a bug. Without the variable (on
    Kubeflow, in tests, in the Python API) nothing changes.

    A step's process imports this package before its step runs (the components import their
    ``step`` modules), which is when this is called."""
    path = os.environ.get(STEP_ERRORS_ENV, "")
    if not path or getattr(sys.excepthook, "records_to", ""):
        return
    from fmnist_kfp import errors

    explained = tuple(value for value in vars(errors).values()
                      if isinstance(value, type) and issubclass(value, Exception)
                      and value.__module__ == errors.__name__)
    previous = sys.excepthook

    def hook(kind, error, trace):
        if not issubclass(kind, explained):
            previous(kind, error, trace)
            return
        print(f"error: {error}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError), open(path, "a") as handle:
            handle.write(json.dumps({"error": kind.__name__, "message": str(error)}) + "\n")

    hook.records_to = path
    sys.excepthook = hook


report_errors_briefly()


def __getattr__(name: str):
    if name == "COMPONENTS":  # folder name → component
        return {folder: getattr(importlib.import_module(f"{__name__}.{folder}"), function)
                for folder, function in FOLDERS.items()}
    for folder, function in FOLDERS.items():
        if name == function:
            return getattr(importlib.import_module(f"{__name__}.{folder}"), function)
    raise AttributeError(name)
