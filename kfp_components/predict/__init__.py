"""The ``predict_with_served_model`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["predict_with_served_model"]


def __getattr__(name: str):
    if name == "predict_with_served_model":
        from kfp_components.predict.component import predict_with_served_model

        return predict_with_served_model
    raise AttributeError(name)
