"""The decorator every component here uses: our image, which already holds kfp and the package."""

from kfp import dsl

from fmnist.settings import component_image


def component(func):
    """``@dsl.component`` on the project image, without a run-time ``pip install kfp``."""
    return dsl.component(func, base_image=component_image(), install_kfp_package=False)
