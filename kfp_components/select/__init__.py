"""The ``select_best_model`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.select import select_best_model``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["select_best_model"]


def __getattr__(name: str):
    if name == "select_best_model":
        from fmnist_kfp.kfp_components.select.component import select_best_model

        return select_best_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
