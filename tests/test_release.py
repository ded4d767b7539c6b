"""``make release``: refused unless the image, the version and the changelog agree; otherwise
the wheel and the compiled YAMLs of the version, stamped with it, in dist/."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from fmnist import __version__
from fmnist.app.release import changelog_problem, image_tag, release_problems

ROOT = Path(__file__).resolve().parents[1]
IMAGE = f"registry.example.com:5000/ml/fmnist-kfp:{__version__}"
DATED = f"# Changelog\n\n## [{__version__}] - 2026-12-01\n\n- things\n"


def _release(tmp_path, image: str, changelog: str) -> subprocess.CompletedProcess:
    """``make release``'s command, in a process of its own: the image is read when the
    pipeline is built, at import."""
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    return subprocess.run(  # the uv the Makefile uses: on the PATH, else .tools/bin/uv
        [sys.executable, "-m", "fmnist.app.release", "--dist", str(tmp_path / "dist"),
         "--changelog", str(tmp_path / "CHANGELOG.md")],
        cwd=ROOT, env={**os.environ, "FMNIST_COMPONENT_IMAGE": image}, capture_output=True,
        text=True, timeout=300)


@pytest.mark.parametrize(("image", "tag"), [
    ("ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0", "0.2.0"),
    ("registry.example.com:5000/ml/fmnist-kfp:1.0.0@sha256:" + "a" * 64, "1.0.0"),
    ("registry.example.com:5000/ml/fmnist-kfp@sha256:" + "a" * 64, ""),
    ("registry.example.com:5000/ml/fmnist-kfp", ""),
])
def test_the_image_tag_is_read_past_registry_ports_and_digests(image, tag):
    assert image_tag(image) == tag


def test_the_changelog_must_date_the_version():
    assert changelog_problem(DATED, __version__) is None
    assert "no section for" in changelog_problem("## [0.0.9] - 2026-01-01\n", __version__)
    undated = f"## [{__version__}] - Unreleased\n"
    assert "is not dated" in changelog_problem(undated, __version__)


def test_the_committed_changelog_covers_this_version_and_the_first():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{__version__}]" in text and "## [0.1.0] - " in text


@pytest.mark.parametrize(("image", "changelog", "message"), [
    ("registry.example.com/ml/fmnist-kfp:0.0.9", DATED,
     f"is tagged '0.0.9', not the package version '{__version__}'"),
    ("registry.example.com/ml/fmnist-kfp@sha256:" + "b" * 64, DATED, "is tagged 'nothing'"),
    (IMAGE, "# Changelog\n", f"CHANGELOG.md has no section for {__version__}"),
    (IMAGE, f"## [{__version__}] - Unreleased\n", "is not dated"),
])
def test_a_release_that_does_not_agree_is_refused_and_writes_nothing(tmp_path, image,
                                                                      changelog, message):
    done = _release(tmp_path, image, changelog)
    assert done.returncode == 2, done.stderr
    assert "cannot release" in done.stderr and message in done.stderr
    assert not (tmp_path / "dist").exists()


def test_both_problems_are_named_at_once():
    problems = release_problems(__version__, "r.example.com/fmnist:9.9.9", "")
    assert len(problems) == 2


@pytest.mark.timeout(300)
def test_a_release_writes_the_wheel_and_the_stamped_yamls(tmp_path):
    from kfp import components

    done = _release(tmp_path, IMAGE, DATED)
    assert done.returncode == 0, done.stderr
    dist = tmp_path / "dist"
    manifest = json.loads((dist / f"release-{__version__}.json").read_text())
    assert manifest["version"] == __version__ and manifest["image"] == IMAGE
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest
    assert not list(dist.glob(".staging-*"))

    wheel = dist / f"fmnist_kfp-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"fmnist_kfp-{__version__}.dist-info/METADATA").decode()
        assert f"Version: {__version__}" in metadata
        assert "Requires-Python: <3.14,>=3.10" in metadata
        assert "pipelines/__init__.py" in archive.namelist()

    pipeline = dist / f"fashion-mnist-training-{__version__}.yaml"
    spec, _ = yaml.safe_load_all(pipeline.read_text())
    info = spec["pipelineInfo"]
    assert info["name"] == "fashion-mnist-training"  # the pipeline's identity: unchanged
    assert info["displayName"] == f"fashion-mnist-training {__version__}"
    assert f"Release {__version__} of fmnist-kfp; every step and job runs {IMAGE}." in \
        info["description"]
    assert spec["sdkVersion"].startswith("kfp-")  # the compiler's, left alone
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {IMAGE}

    from kfp_components import COMPONENTS

    released = sorted(p.name for p in (dist / "components").iterdir())
    assert released == sorted(f"{c.component_spec.name}-{__version__}.yaml"
                              for c in COMPONENTS.values())
    for path in (dist / "components").iterdir():
        loaded = components.load_component_from_file(str(path))
        assert loaded.pipeline_spec.pipeline_info.display_name == \
            f"{loaded.name} {__version__}"
        assert loaded.component_spec.implementation.container.image == IMAGE
