"""The ``ingest_fashion_mnist`` component (component.py) and its step (step.py).

``from fmnist_kfp.kfp_components.ingest import ingest_fashion_mnist``, as its README
says, builds the component on first use: a pipeline pod imports this package for its
step only, and there KFP's runtime ``kfp.dsl`` cannot build components
(``tests/pipelines/test_pipeline.py``)."""

__all__ = ["ingest_fashion_mnist"]


def __getattr__(name: str):
    if name == "ingest_fashion_mnist":
        from fmnist_kfp.kfp_components.ingest.component import ingest_fashion_mnist

        return ingest_fashion_mnist
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
