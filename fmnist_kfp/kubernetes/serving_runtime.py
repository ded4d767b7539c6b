"""The namespaced ``ServingRuntime`` ``fmnist-predictor``: our predictor image
(``python -m fmnist_kfp.serving.model_server.server``) serving TensorFlow SavedModels over the V1
and V2 protocols, for InferenceServices whose ``runtime`` names it
(:mod:`fmnist_kfp.kubernetes.inference_service`).

upstream: docs/upstream.md#kserve
"""

from __future__ import annotations

from fmnist_kfp.kubernetes.inference_service import (
    CONTAINER_NAME,
    HTTP_PORT,
    MODEL_MOUNT,
    PART_OF_LABEL,
    RUNTIME_API_VERSION,
    container_resources,
)
from fmnist_kfp.settings.serving import FMNIST_RUNTIME, KServeSettings


def predictor_args(settings: KServeSettings) -> list[str]:
    """The arguments ``python -m fmnist_kfp.serving.model_server.server`` gets in our runtime's
    container."""
    return [
        f"--model_dir={MODEL_MOUNT}",
        "--model_name={{.Name}}",  # KServe fills in the InferenceService's name
        "--host=0.0.0.0",
        f"--http_port={HTTP_PORT}",
        f"--max_batch_size={settings.max_batch_size}",
        f"--max_batch_latency_ms={settings.max_batch_latency_ms:g}",
        f"--uncertain_margin={settings.uncertain_margin:g}",
    ]


def build_serving_runtime(settings: KServeSettings):
    """The namespaced ``ServingRuntime`` ``fmnist-predictor``: our predictor image serving
    TensorFlow SavedModels over the V1 and V2 protocols."""
    import kserve
    from kubernetes import client

    settings.validate()
    container = client.V1Container(
        name=CONTAINER_NAME,
        image=settings.predictor_image,
        command=["python", "-m", "fmnist_kfp.serving.model_server.server"],
        args=predictor_args(settings),
        resources=container_resources(settings),
        ports=[client.V1ContainerPort(container_port=HTTP_PORT, protocol="TCP")],
    )
    return kserve.V1alpha1ServingRuntime(
        api_version=RUNTIME_API_VERSION,
        kind="ServingRuntime",
        metadata=client.V1ObjectMeta(
            name=FMNIST_RUNTIME, namespace=settings.target_namespace, labels=dict(PART_OF_LABEL)
        ),
        spec=kserve.V1alpha1ServingRuntimeSpec(
            supported_model_formats=[
                kserve.V1alpha1SupportedModelFormat(name="tensorflow", version="2",
                                                    auto_select=False)
            ],
            protocol_versions=["v1", "v2"],
            containers=[container],
        ),
    )
