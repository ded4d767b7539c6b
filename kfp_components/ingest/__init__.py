from kfp_components.ingest.component import ingest_fashion_mnist

__all__ = ["ingest_fashion_mnist"]
