"""The Python API (:mod:`fmnist_kfp.pipelines` forwards its ``__all__`` here): the pipeline,
compiling it, its parameters and their checks, and the components, each taking the images
chosen when its task is made."""

# Re-exported as they are (fmnist_kfp.pipelines.__all__).
from fmnist_kfp.kfp_components.registry import COMPONENTS
from fmnist_kfp.pipelines.arguments import cluster_arguments  # noqa: F401
from fmnist_kfp.pipelines.compile import compile_pipeline  # noqa: F401
from fmnist_kfp.pipelines.fashion_mnist import (  # noqa: F401
    PIPELINE_NAME,
    fashion_mnist_pipeline,
    make_pipeline,
)
from fmnist_kfp.pipelines.for_platform import ForPlatform
from fmnist_kfp.settings.pipeline import PipelineParameters  # noqa: F401
from fmnist_kfp.settings.platform import Platform  # noqa: F401


def _for_the_chosen_images(component) -> ForPlatform:
    """``component`` as a user's ``@dsl.pipeline`` gets it: each task takes the images chosen
    when it is made (``$FMNIST_COMPONENT_IMAGE``/``$FMNIST_GPU_IMAGE`` as set then, else the
    release's); ``.built`` is the registered component."""
    return ForPlatform.of_component(component)


freshness_window = _for_the_chosen_images(COMPONENTS["freshness"])
ingest_fashion_mnist = _for_the_chosen_images(COMPONENTS["ingest"])
tune_hyperparameters = _for_the_chosen_images(COMPONENTS["tune"])
train_model = _for_the_chosen_images(COMPONENTS["train"])
promote_early = _for_the_chosen_images(COMPONENTS["promote"])
select_best_model = _for_the_chosen_images(COMPONENTS["select"])
deploy_model = _for_the_chosen_images(COMPONENTS["deploy"])
predict_with_served_model = _for_the_chosen_images(COMPONENTS["predict"])
batch_predict = _for_the_chosen_images(COMPONENTS["batch_predict"])

