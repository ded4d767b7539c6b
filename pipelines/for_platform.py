"""The pipeline and the components as KFP compiles them: for the images chosen when compiling.

They are built once, with this version's release images in every place an image goes (each
step's container, the ``image``/``gpu_image`` inputs' defaults and the constants the pipeline
passes them, the environment that records a step's image, the description). :class:`ForPlatform`
puts the chosen images in those places in the spec KFP writes, for any compile, ours
(:mod:`fmnist_kfp.pipelines.compile`) or KFP's own (``kfp.compiler.Compiler().compile``,
``kfp.Client.create_run_from_pipeline_func``): the platform it was given, else
:meth:`Platform.from_env` read at that moment, so ``$FMNIST_COMPONENT_IMAGE`` set after the
pipeline is imported still takes effect.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Callable

from google.protobuf import json_format
from kfp.dsl import base_component
from kfp.pipeline_spec import pipeline_spec_pb2

from fmnist_kfp.settings.platform import (
    RELEASE_GPU_IMAGE,
    RELEASE_IMAGE,
    Platform,
    UnpublishedImageWarning,
    unpublished_image_note,
)

# The release image, and its GPU twin, wherever it stands in a string.
_RELEASE_IMAGES = re.compile(re.escape(RELEASE_GPU_IMAGE) + "|" + re.escape(RELEASE_IMAGE))


def _replace_images(value, platform: Platform):
    if isinstance(value, str):
        return _RELEASE_IMAGES.sub(
            lambda m: platform.gpu_image if m[0] == RELEASE_GPU_IMAGE else platform.image, value)
    if isinstance(value, dict):
        return {key: _replace_images(item, platform) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_images(item, platform) for item in value]
    return value


@functools.cache
def _say_once(note: str) -> None:
    warnings.warn(note, UnpublishedImageWarning, stacklevel=4)


class ForPlatform(base_component.BaseComponent):
    """A pipeline or component that KFP compiles for the :class:`Platform` chosen when it is
    compiled: the given one, else :meth:`Platform.from_env` read at that moment.

    ``build`` makes the pipeline (or returns the component) for a platform that still has the
    release images; they are replaced in the spec KFP writes. Everything else is the built
    component's."""

    def __init__(self, build: Callable[[Platform], base_component.BaseComponent],
                 platform: Platform | None = None):
        # No BaseComponent.__init__: the spec is the built one's, read when asked for.
        self._build = functools.cache(build)
        self._platform = platform
        self.name = self.built.name

    @classmethod
    def of_component(cls, component: base_component.BaseComponent,
                     platform: Platform | None = None) -> ForPlatform:
        """A registered component: built once, the same for every platform (its images are
        replaced when it compiles)."""
        return cls(lambda _chosen: component, platform)

    def platform(self) -> Platform:
        return self._platform or Platform.from_env()

    def _built_for(self, platform: Platform) -> base_component.BaseComponent:
        """Built for ``platform``'s claim and Secret, with the release images."""
        return self._build(dataclasses.replace(platform, image=RELEASE_IMAGE,
                                               gpu_image=RELEASE_GPU_IMAGE))

    @property
    def built(self) -> base_component.BaseComponent:
        """The pipeline or component as built, with the release images."""
        return self._built_for(self._platform or Platform.release())

    @property
    def component_spec(self):
        return self.built.component_spec

    @property
    def description(self) -> str | None:
        text = self.built.description
        return _replace_images(text, self.platform()) if text else text

    @property
    def pipeline_spec(self) -> pipeline_spec_pb2.PipelineSpec:
        platform = self.platform()
        if note := unpublished_image_note(platform.image):
            _say_once(note)
        spec = json_format.MessageToDict(self._built_for(platform).pipeline_spec)
        return json_format.ParseDict(_replace_images(spec, platform),
                                     pipeline_spec_pb2.PipelineSpec())

    @property
    def platform_spec(self) -> pipeline_spec_pb2.PlatformSpec:
        return self._built_for(self.platform()).platform_spec

    def execute(self, **kwargs):
        return self.built.execute(**kwargs)

    def __call__(self, *args, **kwargs):
        # A task in a user's own pipeline copies its component's spec now, and KFP's compiler
        # never asks this object again: so the task takes the images chosen at this moment.
        return self._for_task(self.platform())(*args, **kwargs)

    def _for_task(self, platform: Platform) -> base_component.BaseComponent:
        if note := unpublished_image_note(platform.image):
            _say_once(note)
        if (platform.image, platform.gpu_image) == (RELEASE_IMAGE, RELEASE_GPU_IMAGE):
            return self._built_for(platform)
        tasks = self.__dict__.setdefault("_tasks", {})
        if platform not in tasks:  # the spec KFP writes for this platform, loaded back
            import yaml
            from kfp import components

            spec = _replace_images(json_format.MessageToDict(
                self._built_for(platform).pipeline_spec), platform)
            tasks[platform] = components.load_component_from_text(yaml.safe_dump(spec))
        return tasks[platform]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.built, name)
