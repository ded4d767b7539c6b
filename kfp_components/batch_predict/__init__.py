"""The ``batch_predict`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["batch_predict"]


def __getattr__(name: str):
    if name == "batch_predict":
        from kfp_components.batch_predict.component import batch_predict

        return batch_predict
    raise AttributeError(name)
