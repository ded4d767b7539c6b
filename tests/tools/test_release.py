"""``make release``: refused unless the images, the version and the changelog agree and the
images are pinned by digest; otherwise the wheel and the compiled YAMLs of the version, stamped
with it and naming the digest-pinned images, and SHA256SUMS, in dist/. ``make release-check``
and ``make github-release``, the release workflow's other steps (.github/workflows/release.yml),
run here too (``gh`` stands in as a script that records its arguments)."""

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

from fmnist_kfp import __version__
from tests import ROOT
from tools.release import changelog_problem, image_tag, release_problems, tag_problems

# A fake digest: sha256: + 64 hex digits, as docker/build-push-action outputs it.
CPU_DIGEST, GPU_DIGEST = "sha256:" + "c" * 64, "sha256:" + "d" * 64
REPOSITORY = "registry.example.com:5000/ml/fmnist-kfp"
IMAGE = f"{REPOSITORY}:{__version__}@{CPU_DIGEST}"
GPU_IMAGE = f"{REPOSITORY}:{__version__}-gpu@{GPU_DIGEST}"
DATED = f"# Changelog\n\n## [{__version__}] - 2026-12-01\n\n- things\n\n## [0.0.1] - 2026-01-01\n"


def _env(image: str, gpu: str = "", **extra: str) -> dict[str, str]:
    env = {**os.environ, "FMNIST_COMPONENT_IMAGE": image, "FMNIST_GPU_IMAGE": gpu, **extra}
    env.pop("MAKEFLAGS", None)
    return env


def _release(tmp_path, image: str, changelog: str, gpu: str = "") -> subprocess.CompletedProcess:
    """``make release``'s command, in a process of its own: the images are read when the
    pipeline is built, at import."""
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    return subprocess.run(  # the uv the Makefile uses: on the PATH, else .tools/bin/uv
        [sys.executable, "-m", "tools.release", "--dist", str(tmp_path / "dist"),
         "--changelog", str(tmp_path / "CHANGELOG.md")],
        cwd=ROOT, env=_env(image, gpu), capture_output=True, text=True, timeout=300)


def _make(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *arguments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


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


@pytest.mark.parametrize(("image", "gpu", "changelog", "message"), [
    (f"registry.example.com/ml/fmnist-kfp:0.0.9@{CPU_DIGEST}", GPU_IMAGE, DATED,
     f"is tagged '0.0.9', not '{__version__}'"),
    (IMAGE, f"{REPOSITORY}:0.0.9-gpu@{GPU_DIGEST}", DATED,
     f"is tagged '0.0.9-gpu', not '{__version__}-gpu' or '{__version__}'"),
    (f"{REPOSITORY}@{CPU_DIGEST}", GPU_IMAGE, DATED, "is tagged 'nothing'"),
    # A tag can be pushed again: a release names digests.
    (f"{REPOSITORY}:{__version__}", "", DATED, "is not pinned by digest"),
    (IMAGE, f"{REPOSITORY}:{__version__}-gpu", DATED,
     f"the GPU image '{REPOSITORY}:{__version__}-gpu' (FMNIST_GPU_IMAGE) is not pinned"),
    # The GPU image's digest cannot be derived from the CPU image's.
    (IMAGE, "", DATED, "pinned by digest, so the GPU image"),
    (IMAGE, GPU_IMAGE, "# Changelog\n", f"CHANGELOG.md has no section for {__version__}"),
    (IMAGE, GPU_IMAGE, f"## [{__version__}] - Unreleased\n", "is not dated"),
])
def test_a_release_that_does_not_agree_is_refused_and_writes_nothing(tmp_path, image, gpu,
                                                                      changelog, message):
    done = _release(tmp_path, image, changelog, gpu)
    assert done.returncode == 2, done.stderr
    assert "cannot release" in done.stderr and message in done.stderr
    assert not (tmp_path / "dist").exists()


def test_every_problem_is_named_at_once():
    problems = release_problems(__version__, "r.example.com/fmnist:9.9.9",
                                "r.example.com/fmnist:9.9.9-gpu", "")
    assert len(problems) == 5  # two tags, two digests, the changelog
    assert release_problems(__version__, IMAGE, GPU_IMAGE, DATED) == []


@pytest.mark.parametrize(("tag", "changelog", "message"), [
    (f"v{__version__}", DATED, None),
    (__version__, DATED, f"the tag '{__version__}' is not v{__version__}"),
    ("v9.9.9", DATED, f"the tag 'v9.9.9' is not v{__version__}"),
    (f"v{__version__}", f"## [{__version__}] - Unreleased\n", "is not dated"),
])
def test_the_tag_must_be_the_version_before_anything_is_pushed(tmp_path, tag, changelog,
                                                               message):
    """``make release-check TAG=...``, the release workflow's first step."""
    assert bool(tag_problems(tag, __version__, changelog)) == bool(message)
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    output = tmp_path / "github_output"
    done = _make("release-check", f"TAG={tag}", f"CHANGELOG={tmp_path / 'CHANGELOG.md'}",
                 env=_env(IMAGE, GPU_IMAGE, GITHUB_OUTPUT=str(output)))
    if message is None:
        assert done.returncode == 0, done.stderr
        assert output.read_text() == f"version={__version__}\n"  # the images' tag
    else:
        assert done.returncode != 0 and message in done.stderr
        assert not output.exists()


FAKE_GH = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_GH_ARGS"
"""


@pytest.mark.timeout(600)
def test_a_release_writes_the_wheel_the_digest_pinned_yamls_and_checksums(tmp_path):
    """``make release`` as the workflow runs it (the images' fake digests from the build),
    then ``make github-release``."""
    from kfp import components

    (tmp_path / "CHANGELOG.md").write_text(DATED)
    dist = tmp_path / "dist"
    done = _make("release", f"DIST={dist}", f"CHANGELOG={tmp_path / 'CHANGELOG.md'}",
                 env=_env(IMAGE, GPU_IMAGE))
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((dist / f"release-{__version__}.json").read_text())
    assert manifest["version"] == __version__
    assert (manifest["image"], manifest["gpu_image"]) == (IMAGE, GPU_IMAGE)
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest
    assert not list(dist.glob(".staging-*"))
    # SHA256SUMS covers every file and verifies with coreutils.
    listed = [line.split("  ", 1)[1] for line in (dist / "SHA256SUMS").read_text().splitlines()]
    assert sorted(listed) == sorted([*manifest["files"], f"release-{__version__}.json"])
    checked = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout.count(": OK") == len(listed)

    wheel = dist / f"fmnist_kfp-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"fmnist_kfp-{__version__}.dist-info/METADATA").decode()
        assert f"Version: {__version__}" in metadata
        assert "Requires-Python: <3.14,>=3.10" in metadata
        assert "fmnist_kfp/pipelines/__init__.py" in archive.namelist()

    pipeline = dist / f"fashion-mnist-training-{__version__}.yaml"
    spec, _ = yaml.safe_load_all(pipeline.read_text())
    info = spec["pipelineInfo"]
    assert info["name"] == "fashion-mnist-training"  # the pipeline's identity: unchanged
    assert info["displayName"] == f"fashion-mnist-training {__version__}"
    assert (f"Release {__version__} of fmnist-kfp; every step and job runs {IMAGE}, job "
            f"replicas with GPUs {GPU_IMAGE}.") in info["description"]
    assert spec["sdkVersion"].startswith("kfp-")  # the compiler's, left alone
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {IMAGE}
    text = pipeline.read_text()
    assert text.count(f"constant: {GPU_IMAGE}") == 2  # tune's and train's gpu_image
    assert "@sha256:" in text and f":{__version__}\n" not in text  # never a bare tag

    from fmnist_kfp.kfp_components.registry import COMPONENTS

    released = sorted(p.name for p in (dist / "components").iterdir())
    assert released == sorted(f"{c.component_spec.name}-{__version__}.yaml"
                              for c in COMPONENTS.values())
    for path in (dist / "components").iterdir():
        loaded = components.load_component_from_file(str(path))
        assert loaded.pipeline_spec.pipeline_info.display_name == \
            f"{loaded.name} {__version__}"
        assert loaded.component_spec.implementation.container.image == IMAGE
        inputs = loaded.component_spec.inputs
        for name, image in (("image", IMAGE), ("gpu_image", GPU_IMAGE)):
            if name in inputs:
                assert inputs[name].default == image, (path.name, name)

    # make github-release: the same files, checked, to `gh release create --verify-tag`, its
    # notes the changelog's section of the version.
    from tools.release import changelog_section

    assert changelog_section(DATED, __version__) == "- things\n"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)
    recorded = tmp_path / "gh-args"
    env = _env(IMAGE, GPU_IMAGE, PATH=f"{bin_dir}:{os.environ['PATH']}",
               FAKE_GH_ARGS=str(recorded))
    arguments = ("github-release", f"TAG=v{__version__}", f"DIST={dist}",
                 f"CHANGELOG={tmp_path / 'CHANGELOG.md'}")
    done = _make(*arguments, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    gh = recorded.read_text().splitlines()
    assert gh[:4] == ["release", "create", f"v{__version__}", "--verify-tag"]
    attached = {Path(a).name for a in gh if a.startswith(str(dist))}
    assert attached == {Path(name).name for name in listed} | {"SHA256SUMS"}
    assert gh[gh.index("--title") + 1] == f"fmnist-kfp {__version__}"
    # A file changed after `make release` is not published.
    recorded.unlink()
    pipeline.write_text(pipeline.read_text() + "# edited\n")
    done = _make(*arguments, env=env)
    assert done.returncode != 0 and "differ from" in done.stderr and not recorded.exists()
