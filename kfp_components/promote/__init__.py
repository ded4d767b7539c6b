"""The ``promote_early`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.promote import promote_early``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["promote_early"]


def __getattr__(name: str):
    if name == "promote_early":
        from fmnist_kfp.kfp_components.promote.component import promote_early

        return promote_early
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
