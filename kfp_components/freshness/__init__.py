from kfp_components.freshness.component import freshness_window

__all__ = ["freshness_window"]
