from kfp_components.select.component import select_best_model

__all__ = ["select_best_model"]
