"""The decorator every component here uses: our image (which already holds kfp and the
package), and parameter docs that come from the settings.

A docstring entry ``epochs: {setting}`` is replaced by that setting's help text
(:mod:`fmnist.settings`), so the Kubeflow UI shows the same words as the CLI and the README.
"""

from __future__ import annotations

import re

from kfp import dsl

from fmnist.settings.pipeline import NESTED, PipelineParameters
from fmnist.settings.platform import IMAGE_ENV, component_image
from fmnist.settings.schema import Spec
from fmnist.settings.training import TrainingConfig

_MARKER = re.compile(r"^(\s+)(\w+): \{setting\}$", re.MULTILINE)


def setting_specs() -> dict[str, Spec]:
    """Every setting a component parameter can stand for, by name."""
    specs: dict[str, Spec] = {}
    for group in (TrainingConfig, *NESTED.values(), PipelineParameters):
        specs.update(group.specs())
    return specs


def documented_settings(doc: str) -> list[str]:
    """The parameters a docstring documents with ``{setting}``."""
    return [match[2] for match in _MARKER.finditer(doc)]


def document_settings(doc: str) -> str:
    specs = setting_specs()

    def describe(match: re.Match) -> str:
        spec = specs[match[2]]
        return f"{match[1]}{match[2]}: {spec.setting.help}"

    return _MARKER.sub(describe, doc)


def component(func):
    """``@dsl.component`` on the project image, without a run-time ``pip install kfp``.

    The image also goes into the component's environment (``FMNIST_COMPONENT_IMAGE``), so the
    TFJobs, Katib trials and ServingRuntime a step creates run the image the step runs in —
    in the compiled pipeline and in the compiled component alike."""
    settings = documented_settings(func.__doc__ or "")
    func.__doc__ = document_settings(func.__doc__ or "")
    image = component_image()
    built = dsl.component(func, base_image=image, install_kfp_package=False)
    built.component_spec.implementation.container.env = {IMAGE_ENV: image}
    built.documented_settings = settings
    return built
