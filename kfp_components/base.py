"""The decorator every component here uses: our image (which already holds kfp and the
package), inputs documented and defaulted from the settings, outputs described, and what a
Kubernetes run of the step needs.

A docstring entry ``epochs: {setting}`` is replaced by that setting's help text
(:mod:`fmnist_kfp.settings`), so the Kubeflow UI shows the same words as the CLI and the README,
and the input defaults to the Kubeflow variant's value of the setting
(:func:`fmnist_kfp.settings.pipeline.cluster_defaults`; ``image`` and ``gpu_image`` to the images
the component is compiled with, :class:`fmnist_kfp.settings.platform.JobImages`). So a component
loaded from ``compiled/components/`` needs only the inputs that have no sensible default: its
input artifacts (and the predict step's ``url``).

The defaults are set on the component's spec, not in the function's source: the source is what
runs in the pod, and KFP hands each default to it from the spec (``kfp.local`` and the backend's
launcher alike, before the command runs).

A component carries no container environment: a compiled component with one cannot be used
in another pipeline (KFP 2.17 loads it back as a list, which its compiler then calls
``.items()`` on). The images of the pods a step creates are its ``image``/``gpu_image`` inputs
instead.

upstream: docs/upstream.md#kubeflow-pipelines
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import docstring_parser
from kfp import dsl

from fmnist_kfp.settings.pipeline import NESTED, PipelineParameters, cluster_defaults
from fmnist_kfp.settings.platform import JobImages
from fmnist_kfp.settings.schema import Spec
from fmnist_kfp.settings.training import TrainingConfig

_MARKER = re.compile(r"^(\s+)(\w+): \{setting\}$", re.MULTILINE)
SINGLE_OUTPUT = "Output"  # KFP's name for a component's one unnamed return value


def setting_specs() -> dict[str, Spec]:
    """Every setting a component parameter can stand for, by name (``image`` is the step's
    :class:`JobImages` input, not the ``serving`` key of that name)."""
    specs: dict[str, Spec] = {}
    for group in (TrainingConfig, *NESTED.values(), PipelineParameters, JobImages):
        specs.update(group.specs())
    return specs


def setting_defaults() -> dict[str, Any]:
    """What an input documented with ``{setting}`` defaults to: the Kubeflow variant's value
    (the compiled pipeline's default), the trainer's for the settings the pipeline does not
    have (``model_type``), the release images for ``image`` and ``gpu_image`` (compiling puts
    the chosen images in their place)."""
    values: dict[str, Any] = dataclasses.asdict(TrainingConfig())
    values.update(cluster_defaults().arguments())
    values.update(dataclasses.asdict(JobImages.release()))
    return values


def documented_settings(doc: str) -> list[str]:
    """The parameters a docstring documents with ``{setting}``."""
    return [match[2] for match in _MARKER.finditer(doc)]


def document_settings(doc: str) -> str:
    specs = setting_specs()

    def describe(match: re.Match) -> str:
        spec = specs[match[2]]
        return f"{match[1]}{match[2]}: {spec.setting.help}"

    return _MARKER.sub(describe, doc)


@dataclasses.dataclass(frozen=True)
class KubernetesNeeds:
    """What a Kubernetes run of a step needs beside its inputs, set with kfp-kubernetes: the
    shared claim (``volume``: mounted at ``MOUNT_PATH`` and named in ``FMNIST_PVC_NAME``, for
    the step and the pods it creates), and the object-store keys as environment variables
    (``credentials``: for ``s3://`` data, when a Secret holds them). The pipeline applies them
    (``fmnist_kfp.pipelines.fashion_mnist``); each component's README shows the calls."""

    volume: bool = False
    credentials: bool = False


def _describe_outputs(spec, doc: str) -> None:
    """Descriptions for the outputs KFP leaves without one: KFP 2.17 describes outputs only
    from a ``Returns:`` entry that names them (``extract_component_interface`` in
    ``kfp/dsl/component_factory.py``), not the output artifacts documented under ``Args:``
    beside the inputs, nor a single unnamed return value."""
    parsed = docstring_parser.parse(doc)
    described = {param.arg_name: param.description for param in parsed.params}
    returned = parsed.returns.description if parsed.returns else None
    for name, output in (spec.outputs or {}).items():
        text = output.description or described.get(name) or (
            returned if name == SINGLE_OUTPUT else None)
        output.description = " ".join(text.split()) if text else None


def component(func=None, *, defaults: dict[str, Any] | None = None, volume: bool = False,
              credentials: bool = False):
    """``@dsl.component`` on the project image, without a run-time ``pip install kfp``.

    ``defaults``: inputs that are not settings and have a sensible default (the settings'
    own come from the settings); ``volume`` and ``credentials``: the step's
    :class:`KubernetesNeeds`."""
    if func is None:
        return lambda f: component(f, defaults=defaults, volume=volume, credentials=credentials)
    settings = documented_settings(func.__doc__ or "")
    func.__doc__ = document_settings(func.__doc__ or "")
    images = JobImages.release()  # compiling puts the chosen images in their place
    built = dsl.component(func, base_image=images.image, install_kfp_package=False)
    spec = built.component_spec
    values = setting_defaults()
    for name, value in {**{n: values[n] for n in settings}, **(defaults or {})}.items():
        spec.inputs[name] = dataclasses.replace(spec.inputs[name], default=value, optional=True)
    _describe_outputs(spec, func.__doc__)
    built.documented_settings = settings
    built.kubernetes_needs = KubernetesNeeds(volume=volume, credentials=credentials)
    return built
