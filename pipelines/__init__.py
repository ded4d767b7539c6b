"""The Python API: the pipeline, its parameters and its components.

>>> import kfp
>>> from pipelines import PipelineParameters, fashion_mnist_pipeline
>>> client = kfp.Client(host="https://kubeflow.example.com/pipeline")
>>> client.create_run_from_pipeline_func(
...     fashion_mnist_pipeline, arguments={"epochs": 12, "num_workers": 4})

``fashion_mnist_pipeline`` is the Kubeflow variant (TFJobs; what ``compiled/`` holds);
``make_pipeline()`` builds the local one. :class:`PipelineParameters` names, types, documents
and validates every parameter; ``PipelineParameters(...).changed()`` is a run's arguments.
"""

from fmnist.settings.pipeline import PipelineParameters
from kfp_components import (
    COMPONENTS,
    deploy_model,
    freshness_window,
    ingest_fashion_mnist,
    predict_with_served_model,
    select_best_model,
    train_model,
    tune_hyperparameters,
)
from pipelines.fashion_mnist import PIPELINE_NAME, fashion_mnist_pipeline, make_pipeline

__all__ = [
    "PIPELINE_NAME",
    "PipelineParameters",
    "fashion_mnist_pipeline",
    "make_pipeline",
    "COMPONENTS",
    "freshness_window",
    "ingest_fashion_mnist",
    "tune_hyperparameters",
    "train_model",
    "select_best_model",
    "deploy_model",
    "predict_with_served_model",
]
