"""The ``tune_hyperparameters`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.tune import tune_hyperparameters``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["tune_hyperparameters"]


def __getattr__(name: str):
    if name == "tune_hyperparameters":
        from fmnist_kfp.kfp_components.tune.component import tune_hyperparameters

        return tune_hyperparameters
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
