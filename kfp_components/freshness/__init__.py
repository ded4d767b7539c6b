"""The ``freshness_window`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["freshness_window"]


def __getattr__(name: str):
    if name == "freshness_window":
        from kfp_components.freshness.component import freshness_window

        return freshness_window
    raise AttributeError(name)
