"""The ``train_model`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["train_model"]


def __getattr__(name: str):
    if name == "train_model":
        from kfp_components.train.component import train_model

        return train_model
    raise AttributeError(name)
