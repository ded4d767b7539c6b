"""Every component, built, by folder in the pipeline's order (the compiler, the docs and the
Python API list them from here), and what a Kubernetes run of each needs beside its inputs.

Importing this builds every component: a pipeline pod, whose KFP runtime cannot build them,
imports only its step (``tests/pipelines/test_pipeline.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.kfp_components.batch_predict.component import batch_predict
from fmnist_kfp.kfp_components.deploy.component import deploy_model
from fmnist_kfp.kfp_components.freshness.component import freshness_window
from fmnist_kfp.kfp_components.ingest.component import ingest_fashion_mnist
from fmnist_kfp.kfp_components.predict.component import predict_with_served_model
from fmnist_kfp.kfp_components.promote.component import promote_early
from fmnist_kfp.kfp_components.select.component import select_best_model
from fmnist_kfp.kfp_components.train.component import train_model
from fmnist_kfp.kfp_components.tune.component import tune_hyperparameters

COMPONENTS = {
    "freshness": freshness_window,
    "ingest": ingest_fashion_mnist,
    "tune": tune_hyperparameters,
    "train": train_model,
    "promote": promote_early,
    "select": select_best_model,
    "deploy": deploy_model,
    "predict": predict_with_served_model,
    "batch_predict": batch_predict,
}


@dataclass(frozen=True)
class KubernetesNeeds:
    """What a Kubernetes run of a step needs beside its inputs, set with kfp-kubernetes: the
    shared claim (``volume``: mounted at ``MOUNT_PATH`` and named in ``FMNIST_PVC_NAME``, for
    the step and the pods it creates), and the object-store keys as environment variables
    (``credentials``: for ``s3://`` data, when a Secret holds them). The pipeline applies them
    (``fmnist_kfp.pipelines.fashion_mnist``); each component's README shows the calls."""

    volume: bool = False
    credentials: bool = False


# By folder, as COMPONENTS.
KUBERNETES_NEEDS = {
    "freshness": KubernetesNeeds(),
    "ingest": KubernetesNeeds(credentials=True),  # reads s3:// data
    # These stage the dataset on the shared claim for the pods they create.
    "tune": KubernetesNeeds(volume=True, credentials=True),
    "train": KubernetesNeeds(volume=True, credentials=True),
    "promote": KubernetesNeeds(),
    "select": KubernetesNeeds(),
    "deploy": KubernetesNeeds(),
    "predict": KubernetesNeeds(),
    "batch_predict": KubernetesNeeds(volume=True, credentials=True),
}
