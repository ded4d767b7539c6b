"""The ``predict_with_served_model`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.predict import predict_with_served_model``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["predict_with_served_model"]


def __getattr__(name: str):
    if name == "predict_with_served_model":
        from fmnist_kfp.kfp_components.predict.component import predict_with_served_model

        return predict_with_served_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
