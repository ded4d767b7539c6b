"""The pipeline's components, one folder each (kubeflow/pipelines-components' layout):
``component.py`` (the ``@dsl.component``), ``step.py`` (the step's logic, plain Python),
``metadata.yaml``, a generated ``README.md`` and ``tests/``. Their compiled YAML is in
``compiled/components/`` for other pipelines to load.

Nothing is imported until it is used: a pipeline pod imports only its step (KFP's runtime
``kfp.dsl`` cannot build components)."""

import importlib

# Folder name → the component's function name.
FOLDERS = {
    "freshness": "freshness_window",
    "ingest": "ingest_fashion_mnist",
    "tune": "tune_hyperparameters",
    "train": "train_model",
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


def __getattr__(name: str):
    if name == "COMPONENTS":  # folder name → component
        return {folder: getattr(importlib.import_module(f"kfp_components.{folder}"), function)
                for folder, function in FOLDERS.items()}
    for folder, function in FOLDERS.items():
        if name == function:
            return getattr(importlib.import_module(f"kfp_components.{folder}"), function)
    raise AttributeError(name)
