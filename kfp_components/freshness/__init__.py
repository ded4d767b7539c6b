"""The ``freshness_window`` component (component.py).

``from fmnist_kfp.kfp_components.freshness import freshness_window``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["freshness_window"]


def __getattr__(name: str):
    if name == "freshness_window":
        from fmnist_kfp.kfp_components.freshness.component import freshness_window

        return freshness_window
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
