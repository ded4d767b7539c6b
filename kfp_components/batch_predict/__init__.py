"""The ``batch_predict`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.batch_predict import batch_predict``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["batch_predict"]


def __getattr__(name: str):
    if name == "batch_predict":
        from fmnist_kfp.kfp_components.batch_predict.component import batch_predict

        return batch_predict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
