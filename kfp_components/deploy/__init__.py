from kfp_components.deploy.component import deploy_model

__all__ = ["deploy_model"]
