from kfp_components.predict.component import predict_with_served_model

__all__ = ["predict_with_served_model"]
