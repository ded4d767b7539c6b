"""The images a compiled pipeline runs are chosen when it is compiled, never when it is imported:
the image given (``image=``, ``--image``), else ``$FMNIST_COMPONENT_IMAGE`` as set then, else
the release's, which says once that it is not published yet."""

from __future__ import annotations

import warnings

import pytest
import yaml
from kfp import compiler

from fmnist_kfp import __version__
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.pipelines import Platform, compile_pipeline, fashion_mnist_pipeline, make_pipeline
from fmnist_kfp.settings import platform as platform_module
from fmnist_kfp.settings.platform import (
    GPU_IMAGE_ENV,
    IMAGE_ENV,
    RELEASE_GPU_IMAGE,
    RELEASE_IMAGE,
    UnpublishedImageWarning,
)

USER_IMAGE = "registry.example.com/team/fmnist:1.0"


def _references(path) -> dict[str, int]:
    text = open(path).read()
    return {"release": text.count(RELEASE_IMAGE), "user": text.count(USER_IMAGE),
            "user gpu": text.count(USER_IMAGE + "-gpu")}


def _executor_images(path) -> set[str]:
    spec = next(yaml.safe_load_all(open(path)))
    return {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}


@pytest.fixture(scope="module")
def release_references(tmp_path_factory):
    """How often the release images stand in the pipeline compiled with nothing chosen."""
    path = tmp_path_factory.mktemp("release") / "p.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnpublishedImageWarning)
        compile_pipeline(str(path))
    text = path.read_text()
    return text.count(RELEASE_IMAGE), text.count(RELEASE_GPU_IMAGE)


def test_the_variable_set_after_import_changes_every_reference(tmp_path, monkeypatch,
                                                               release_references):
    """KFP's own compiler (as ``kfp.Client.create_run_from_pipeline_func`` calls it) on the
    pipeline imported before the variable was set: every place the release image stood now
    names the user's, its GPU twin the user's tag + -gpu; none names the release's."""
    monkeypatch.delenv(GPU_IMAGE_ENV, raising=False)
    monkeypatch.setenv(IMAGE_ENV, USER_IMAGE)
    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(fashion_mnist_pipeline, str(path))
    total, gpu = release_references
    assert total > 30 and gpu > 0
    assert _references(path) == {"release": 0, "user": total, "user gpu": gpu}
    assert _executor_images(path) == {USER_IMAGE}


def test_an_explicit_image_wins_over_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(IMAGE_ENV, "registry.example.com/other:9.9")
    monkeypatch.setenv(GPU_IMAGE_ENV, "registry.example.com/other:9.9-gpu")
    path = compile_pipeline(str(tmp_path / "p.yaml"), image=USER_IMAGE)
    text = open(path).read()
    assert "other:9.9" not in text and RELEASE_IMAGE not in text
    assert USER_IMAGE + "-gpu" in text  # the given image's twin, not the stale variable's
    assert _executor_images(path) == {USER_IMAGE}


def test_a_platform_given_to_make_pipeline_is_every_image(tmp_path, monkeypatch):
    monkeypatch.setenv(IMAGE_ENV, "registry.example.com/other:9.9")
    pipeline = make_pipeline(platform=Platform(image=USER_IMAGE, pvc_name="team-claim"))
    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    assert _references(path)["release"] == 0 and "other:9.9" not in path.read_text()
    assert "team-claim" in path.read_text()
    assert _executor_images(path) == {USER_IMAGE}


def test_the_unpublished_release_image_is_named_once_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv(IMAGE_ENV, raising=False)
    monkeypatch.delenv(GPU_IMAGE_ENV, raising=False)
    monkeypatch.setattr(platform_module, "PUBLISHED_VERSIONS", frozenset())
    from fmnist_kfp.pipelines import for_platform

    for_platform._say_once.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in ("a.yaml", "b.yaml"):
            compile_pipeline(str(tmp_path / name))
        compile_pipeline(str(tmp_path / "c.yaml"), image=USER_IMAGE)
    notes = [str(w.message) for w in caught if w.category is UnpublishedImageWarning]
    assert len(notes) == 1
    assert RELEASE_IMAGE in notes[0] and "not published" in notes[0]
    assert "docker build" in notes[0] and "--image" in notes[0] and IMAGE_ENV in notes[0]

    monkeypatch.setattr(platform_module, "PUBLISHED_VERSIONS", frozenset({__version__}))
    assert platform_module.unpublished_image_note(RELEASE_IMAGE) == ""


def test_an_image_that_cannot_be_compiled_for_fails_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv(GPU_IMAGE_ENV, raising=False)
    with pytest.raises(UserInputError, match="has no tag"):
        compile_pipeline(str(tmp_path / "p.yaml"), image="registry.example.com/team/fmnist")
    digest = "registry.example.com/team/fmnist:1.0@sha256:" + "a" * 64
    with pytest.raises(UserInputError, match="--gpu-image, gpu_image= or FMNIST_GPU_IMAGE"):
        compile_pipeline(str(tmp_path / "p.yaml"), image=digest)
    assert not (tmp_path / "p.yaml").exists()


def test_the_readme_states_the_release_status_the_code_knows():
    """README.md's first screen says whether this version's image exists, as
    ``PUBLISHED_VERSIONS`` does (the note compiling gives comes from the same constant)."""
    from pathlib import Path

    first_screen = (Path(__file__).resolve().parents[2] / "README.md").read_text()[:1200]
    status = first_screen.split("**Release status:**", 1)[1].split("\n\n", 1)[0]
    if __version__ in platform_module.PUBLISHED_VERSIONS:
        assert "no release" not in status and RELEASE_IMAGE in status.replace("\n", " ")
    else:
        assert "no release is tagged yet" in status and "--image" in status
        assert RELEASE_IMAGE in status.replace("\n", " ")


def test_our_components_in_a_users_pipeline_take_the_image_set_after_import(tmp_path,
                                                                             monkeypatch):
    """``from fmnist_kfp.pipelines import train_model`` in a user's own ``@dsl.pipeline``: each
    task takes the images chosen when it is made (the variable, set after the import and
    before the pipeline is defined), the
    GPU image included; without the variable, the release's. The user's own component keeps
    its image."""
    from kfp import components, dsl

    from fmnist_kfp.pipelines import ingest_fashion_mnist, train_model

    count = components.load_component_from_text(
        "name: count\nimplementation:\n  container:\n    image: python:3.12\n"
        "    command: [python, -c, 'print(1)']\n")

    def users_pipeline():  # KFP builds the graph, the tasks with it, when this is decorated
        @dsl.pipeline(name="users-pipeline")
        def pipeline():
            data = ingest_fashion_mnist()
            train_model(dataset=data.outputs["dataset"], model_type="basic", epochs=1)
            count()
        return pipeline

    monkeypatch.delenv(GPU_IMAGE_ENV, raising=False)
    monkeypatch.setenv(IMAGE_ENV, USER_IMAGE)
    path = tmp_path / "user.yaml"
    compiler.Compiler().compile(users_pipeline(), str(path))
    # The two executors' images and train's image and gpu_image defaults, in its spec and
    # in its source (which writes them literally).
    assert _references(path) == {"release": 0, "user": 6, "user gpu": 2}
    assert _executor_images(path) == {USER_IMAGE, "python:3.12"}

    monkeypatch.delenv(IMAGE_ENV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnpublishedImageWarning)
        compiler.Compiler().compile(users_pipeline(), str(path))
    assert _references(path)["user"] == 0
    assert _executor_images(path) == {RELEASE_IMAGE, "python:3.12"}
