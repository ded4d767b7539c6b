"""The ``tune_hyperparameters`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["tune_hyperparameters"]


def __getattr__(name: str):
    if name == "tune_hyperparameters":
        from kfp_components.tune.component import tune_hyperparameters

        return tune_hyperparameters
    raise AttributeError(name)
