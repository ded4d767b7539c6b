"""The ``ingest_fashion_mnist`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

__all__ = ["ingest_fashion_mnist"]


def __getattr__(name: str):
    if name == "ingest_fashion_mnist":
        from kfp_components.ingest.component import ingest_fashion_mnist

        return ingest_fashion_mnist
    raise AttributeError(name)
