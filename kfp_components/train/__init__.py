from kfp_components.train.component import train_model

__all__ = ["train_model"]
