"""The ``select_best_model`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["select_best_model"]


def __getattr__(name: str):
    if name == "select_best_model":
        from kfp_components.select.component import select_best_model

        return select_best_model
    raise AttributeError(name)
