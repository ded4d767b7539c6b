"""The ``train_model`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.train import train_model``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["train_model"]


def __getattr__(name: str):
    if name == "train_model":
        from fmnist_kfp.kfp_components.train.component import train_model

        return train_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
