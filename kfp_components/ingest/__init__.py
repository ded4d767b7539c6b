"""The ``ingest_fashion_mnist`` component (component.py) and its step (step.py).

The component is imported on first use: inside a pipeline pod KFP's runtime ``kfp.dsl`` has no
``component`` decorator, and the pod imports only the step."""

from fmnist_kfp.kfp_components import lazy_component

__all__ = ["ingest_fashion_mnist"]

__getattr__ = lazy_component(__name__, "ingest_fashion_mnist")
