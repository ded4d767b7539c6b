from kfp_components.tune.component import tune_hyperparameters

__all__ = ["tune_hyperparameters"]
