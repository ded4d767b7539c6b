"""The ``deploy_model`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.deploy import deploy_model``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["deploy_model"]


def __getattr__(name: str):
    if name == "deploy_model":
        from fmnist_kfp.kfp_components.deploy.component import deploy_model

        return deploy_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
