"""The decorator every component here uses: our image (which already holds kfp and the
package), without a run-time ``pip install kfp``, and every description one line.

A component's source says what it takes: each input's default is written in its signature and
each input's description in its docstring. An input named for a setting
(:func:`setting_specs`) defaults to the Kubeflow variant's value of that setting
(:func:`setting_defaults`) and is described by that setting's help, so the Kubeflow UI shows the
same words as the CLI and the README; ``tests/kfp_components/test_component_signatures.py`` holds
them equal. So a component loaded from ``compiled/components/`` needs only the inputs that have
no sensible default: its input artifacts (and the predict step's ``url``).

A component carries no container environment: a compiled component with one cannot be used
in another pipeline (KFP 2.17 loads it back as a list, which its compiler then calls
``.items()`` on). The images of the pods a step creates are its ``image``/``gpu_image`` inputs
instead.

upstream: docs/upstream.md#kubeflow-pipelines
"""

from __future__ import annotations

import dataclasses
from typing import Any

import docstring_parser
from kfp import dsl

from fmnist_kfp.settings.pipeline import NESTED, PipelineParameters, cluster_defaults
from fmnist_kfp.settings.platform import JobImages
from fmnist_kfp.settings.schema import Settings, Spec
from fmnist_kfp.settings.training import TrainingConfig

SINGLE_OUTPUT = "Output"  # KFP's name for a component's one unnamed return value


def setting_specs() -> dict[str, Spec]:
    """Every setting a component input can stand for, by name (``image`` is the step's
    :class:`JobImages` input, not the ``serving`` key of that name)."""
    specs: dict[str, Spec] = {}
    groups: tuple[type[Settings], ...] = (TrainingConfig, *NESTED.values(), PipelineParameters,
                                          JobImages)
    for group in groups:
        specs.update(group.specs())
    return specs


def setting_defaults() -> dict[str, Any]:
    """What a component input named for a setting defaults to: the Kubeflow variant's value
    (the compiled pipeline's default), the trainer's for the settings the pipeline does not
    have (``model_type``), the release images for ``image`` and ``gpu_image`` (compiling puts
    the chosen images in their place)."""
    values: dict[str, Any] = dataclasses.asdict(TrainingConfig())
    values.update(cluster_defaults().arguments())
    values.update(dataclasses.asdict(JobImages.release()))
    return values


def _describe(spec, doc: str) -> None:
    """One-line descriptions for every input and output. KFP 2.17 keeps a docstring entry's
    line breaks in an input's description (the source's wrapping, not the text's), and
    describes outputs only from a ``Returns:`` entry that names them
    (``extract_component_interface`` in ``kfp/dsl/component_factory.py``), not the output
    artifacts documented under ``Args:`` beside the inputs, nor a single unnamed return value."""
    parsed = docstring_parser.parse(doc)
    described = {param.arg_name: param.description for param in parsed.params}
    returned = parsed.returns.description if parsed.returns else None
    for value in (spec.inputs or {}).values():
        if value.description:
            value.description = " ".join(value.description.split())
    for name, output in (spec.outputs or {}).items():
        text = output.description or described.get(name) or (
            returned if name == SINGLE_OUTPUT else None)
        output.description = " ".join(text.split()) if text else None


def component(func):
    """``@dsl.component`` on the project image, without a run-time ``pip install kfp``."""
    images = JobImages.release()  # compiling puts the chosen images in their place
    built = dsl.component(func, base_image=images.image, install_kfp_package=False)
    _describe(built.component_spec, func.__doc__ or "")
    return built
