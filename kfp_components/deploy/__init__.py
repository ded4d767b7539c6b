"""The ``deploy_model`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["deploy_model"]


def __getattr__(name: str):
    if name == "deploy_model":
        from kfp_components.deploy.component import deploy_model

        return deploy_model
    raise AttributeError(name)
