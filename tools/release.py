"""``make release``: the wheel, the compiled pipeline and the compiled components of this
version, written to ``dist/``; ``make release-check TAG=v<version>`` before anything of it is
built or pushed; ``make github-release TAG=v<version>`` attaches ``dist/`` to the GitHub release.

A release is things that must agree: the package version (``fmnist_kfp.__version__``, the one
place it is set; the wheel's version comes from it), the images every step and job runs
(``$FMNIST_COMPONENT_IMAGE``, and ``$FMNIST_GPU_IMAGE`` for replicas with GPUs), the git tag
(``v<version>``) and ``CHANGELOG.md``. So it refuses, before building anything, when

- an image's tag is not the version (``<version>-gpu`` for the GPU image also does), so the
  YAML would run other code than the wheel holds, or it names no tag (a digest alone);
- an image is not pinned by digest (``<repository>:<version>@sha256:<digest>``: a tag can be
  pushed again after the release; the release workflow takes the digests from the build);
- ``CHANGELOG.md`` has no section for the version, or the section is still ``Unreleased``
  (cutting a release is giving it a date).

It writes, all or nothing (built aside, then moved into ``dist/``)::

    dist/fmnist_kfp-<version>-py3-none-any.whl
    dist/fashion-mnist-training-<version>.yaml        the pipeline
    dist/components/<component>-<version>.yaml        each component
    dist/release-<version>.json                       version, images, files and their sha256
    dist/SHA256SUMS                                   all of the above, for ``sha256sum -c``

Each YAML names its release in ``pipelineInfo.displayName`` (and the pipeline in its
description, with the image): see :mod:`fmnist_kfp.pipelines.compile`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fmnist_kfp import __version__
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.platform import (
    GPU_IMAGE_ENV,
    GPU_TAG_SUFFIX,
    IMAGE_ENV,
    component_image,
    gpu_image,
)

ROOT = Path(__file__).resolve().parents[1]
PIPELINE_FILE = "fashion-mnist-training-{version}.yaml"
CHECKSUMS = "SHA256SUMS"
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_tag(image: str) -> str:
    """The tag of ``registry/repo:tag`` (``registry:5000/repo:tag@sha256:...`` too); "" if
    the image has none."""
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return last.split(":", 1)[1] if ":" in last else ""


def changelog_problem(text: str, version: str) -> str | None:
    """Why ``CHANGELOG.md`` does not show ``version`` as released, or None."""
    heading = re.search(rf"^## \[?{re.escape(version)}\]?(.*)$", text, re.MULTILINE)
    if heading is None:
        return (f"CHANGELOG.md has no section for {version}; add '## [{version}] - YYYY-MM-DD' "
                "with what changed (from git log)")
    if "unreleased" in heading[1].lower() or not re.search(r"\d{4}-\d\d-\d\d", heading[1]):
        return (f"CHANGELOG.md's section for {version} is not dated ({heading[0].strip()!r}); "
                "give it the release date to cut the release")
    return None


def image_problems(version: str, image: str, gpu: str) -> list[str]:
    """What keeps the images from being a release's: their tags and digests."""
    problems = []
    for what, variable, name, tags in (
            ("component image", IMAGE_ENV, image, (version,)),
            ("GPU image", GPU_IMAGE_ENV, gpu, (version + GPU_TAG_SUFFIX, version))):
        tag = image_tag(name)
        if tag not in tags:
            problems.append(
                f"the {what} {name!r} ({variable}) is tagged {tag or 'nothing'!r}, not "
                f"{' or '.join(repr(t) for t in tags)}: the released YAML would run other code "
                f"than the wheel. Build and push the image as ...:{tags[0]} and set {variable} "
                "to it")
        if not _DIGEST.search(name):
            problems.append(
                f"the {what} {name!r} ({variable}) is not pinned by digest, and a tag can be "
                f"pushed again after the release: set {variable}=<repository>:{tags[0]}"
                "@sha256:<digest> (what the push printed; the release workflow takes it from "
                "the build)")
    return problems


def release_problems(version: str, image: str, gpu: str, changelog: str) -> list[str]:
    problems = image_problems(version, image, gpu)
    if problem := changelog_problem(changelog, version):
        problems.append(problem)
    return problems


def tag_problems(tag: str, version: str, changelog: str) -> list[str]:
    """What keeps the git ``tag`` from releasing this checkout: it must be ``v<version>``, and
    the changelog must date the version (checked before any image is pushed)."""
    problems = []
    if tag != f"v{version}":
        problems.append(f"the tag {tag!r} is not v{version}, the package version "
                        "(fmnist_kfp/__init__.py): tag the commit that sets the version, or set "
                        "the version the tag names")
    if problem := changelog_problem(changelog, version):
        problems.append(problem)
    return problems


def changelog_section(text: str, version: str) -> str:
    """The changelog's section of ``version`` (the GitHub release's notes)."""
    match = re.search(rf"^## \[?{re.escape(version)}\]?.*?$(.*?)(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    return match[1].strip() + "\n" if match else ""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compile(staging: Path, version: str) -> list[Path]:
    """The compiled pipeline and components, renamed with the version."""
    from fmnist_kfp.pipelines.compile import COMPONENTS_SUBDIR, compile_all

    compiled = staging / "compiled"
    written = []
    for path in map(Path, compile_all(str(compiled))):
        relative = path.relative_to(compiled)
        if relative.parent == Path(COMPONENTS_SUBDIR):
            target = staging / COMPONENTS_SUBDIR / f"{path.stem}-{version}.yaml"
        else:
            target = staging / PIPELINE_FILE.format(version=version)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
        written.append(target)
    shutil.rmtree(compiled)
    return written


def _build_wheel(staging: Path, version: str, uv: str) -> Path:
    subprocess.run([uv, "build", "--wheel", "--out-dir", str(staging), str(ROOT)], check=True,
                   stdout=subprocess.DEVNULL)
    wheels = list(staging.glob("*.whl"))
    if [w.name for w in wheels] != [f"fmnist_kfp-{version}-py3-none-any.whl"]:
        raise RuntimeError(f"expected the wheel of {version}, built {[w.name for w in wheels]}")
    return wheels[0]


def checksums(directory: Path, files: list[Path]) -> str:
    """``sha256sum``'s format: ``<sha256>  <path relative to directory>`` per file."""
    return "".join(f"{_sha256(path)}  {path.relative_to(directory).as_posix()}\n"
                   for path in sorted(files))


def verify_checksums(directory: Path) -> list[str]:
    """The files of ``directory/SHA256SUMS`` that are missing or differ (``sha256sum -c``)."""
    bad = []
    for line in (directory / CHECKSUMS).read_text().splitlines():
        digest, name = line.split("  ", 1)
        path = directory / name
        if not path.is_file() or _sha256(path) != digest:
            bad.append(name)
    return bad


def release(dist: Path, *, uv: str, changelog: Path = ROOT / "CHANGELOG.md") -> dict:
    """Checks, builds and writes the release into ``dist``; returns its manifest."""
    version, image = __version__, component_image()
    try:
        gpu = gpu_image()
    except UserInputError as error:  # a digest-pinned image without FMNIST_GPU_IMAGE
        raise UserInputError(f"cannot release:\n  - {error}") from None
    problems = release_problems(version, image, gpu, changelog.read_text())
    if problems:
        raise UserInputError("cannot release:\n  - " + "\n  - ".join(problems))
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dist, prefix=".staging-") as tmp:
        staging = Path(tmp)
        files = [_build_wheel(staging, version, uv), *_compile(staging, version)]
        manifest = {
            "version": version,
            "image": image,
            "gpu_image": gpu,
            "files": {str(p.relative_to(staging)): _sha256(p) for p in files},
        }
        (staging / f"release-{version}.json").write_text(json.dumps(manifest, indent=2) + "\n")
        files.append(staging / f"release-{version}.json")
        (staging / CHECKSUMS).write_text(checksums(staging, files))
        for path in sorted(staging.rglob("*")):
            if path.is_file():
                target = dist / path.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
    return manifest


def check_tag(tag: str, changelog: Path) -> int:
    """``make release-check``: the tag names this version, which the changelog dates; the
    version goes to ``$GITHUB_OUTPUT`` (``version=...``) when the workflow gives one."""
    problems = tag_problems(tag, __version__, changelog.read_text())
    if problems:
        print("error: cannot release:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 2
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as handle:
            handle.write(f"version={__version__}\n")
    print(f"{tag}: releases {__version__}")
    return 0


def github_release(tag: str, dist: Path, changelog: Path, gh: str = "gh") -> int:
    """``make github-release``: the files ``make release`` wrote for this version, checked
    against ``SHA256SUMS``, attached to a new GitHub release of ``tag`` (``gh release create
    --verify-tag``: the tag must exist on GitHub), its notes the changelog's section."""
    problems = tag_problems(tag, __version__, changelog.read_text())
    manifest = dist / f"release-{__version__}.json"
    if not manifest.exists():
        problems.append(f"{manifest} is missing: run `make release` first")
    elif bad := verify_checksums(dist):
        problems.append(f"{', '.join(bad)} differ from {dist / CHECKSUMS}: run `make release` "
                        "again")
    if problems:
        print("error: cannot publish:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 2
    files = [str(dist / name) for name in json.loads(manifest.read_text())["files"]]
    with tempfile.TemporaryDirectory() as tmp:
        notes = Path(tmp) / "notes.md"
        notes.write_text(changelog_section(changelog.read_text(), __version__))
        command = [gh, "release", "create", tag, "--verify-tag", "--title",
                   f"fmnist-kfp {__version__}", "--notes-file", str(notes), *files,
                   str(manifest), str(dist / CHECKSUMS)]
        return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.release",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="where the release goes")
    parser.add_argument("--uv", default=shutil.which("uv") or str(ROOT / ".tools/bin/uv"),
                        help="the uv that builds the wheel")
    parser.add_argument("--changelog", default=str(ROOT / "CHANGELOG.md"))
    parser.add_argument("--check-tag", metavar="TAG",
                        help="only check that TAG (v<version>) may release this checkout")
    parser.add_argument("--github-release", metavar="TAG",
                        help="attach dist/'s release of this version to a GitHub release of "
                             "TAG (gh, GH_TOKEN)")
    args = parser.parse_args(argv)
    if args.check_tag is not None:
        return check_tag(args.check_tag, Path(args.changelog))
    if args.github_release is not None:
        return github_release(args.github_release, Path(args.dist), Path(args.changelog))
    try:
        manifest = release(Path(args.dist), uv=args.uv, changelog=Path(args.changelog))
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"released {manifest['version']} (images {manifest['image']}, "
          f"{manifest['gpu_image']}) into {args.dist}:")
    for name, digest in manifest["files"].items():
        print(f"  {name}  sha256 {digest}")
    print(f"  {CHECKSUMS}: `cd {args.dist} && sha256sum -c {CHECKSUMS}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
