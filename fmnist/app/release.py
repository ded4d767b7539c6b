"""``make release``: the wheel, the compiled pipeline and the compiled components of this
version, written to ``dist/``.

A release is three things that must agree: the package version (``fmnist.__version__``, the one
place it is set; the wheel's version comes from it), the component image every step and job
runs (``$FMNIST_COMPONENT_IMAGE``, default ``ghcr.io/fmnist-kfp/fmnist-kfp:<version>``), and
``CHANGELOG.md``. So it refuses, before building anything, when

- the image's tag is not the version (the YAML would run other code than the wheel holds), or
  the image is pinned by digest alone (its version cannot be read);
- ``CHANGELOG.md`` has no section for the version, or the section is still ``Unreleased``
  (cutting a release is giving it a date).

It writes, all or nothing (built aside, then moved into ``dist/``)::

    dist/fmnist_kfp-<version>-py3-none-any.whl
    dist/fashion-mnist-training-<version>.yaml        the pipeline
    dist/components/<component>-<version>.yaml        each component
    dist/release-<version>.json                       version, image, files and their sha256

Each YAML names its release in ``pipelineInfo.displayName`` (and the pipeline in its
description, with the image): see :mod:`pipelines.compile`.
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

from fmnist import __version__
from fmnist.errors import UserInputError
from fmnist.settings.platform import IMAGE_ENV, component_image

ROOT = Path(__file__).resolve().parents[2]
PIPELINE_FILE = "fashion-mnist-training-{version}.yaml"


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


def release_problems(version: str, image: str, changelog: str) -> list[str]:
    problems = []
    tag = image_tag(image)
    if tag != version:
        problems.append(
            f"the component image {image!r} ({IMAGE_ENV}) is tagged {tag or 'nothing'!r}, not "
            f"the package version {version!r}: the released YAML would run other code than the "
            f"wheel. Build and push the image as ...:{version} and set {IMAGE_ENV} to it")
    if problem := changelog_problem(changelog, version):
        problems.append(problem)
    return problems


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compile(staging: Path, version: str) -> list[Path]:
    """The compiled pipeline and components, renamed with the version."""
    from pipelines.compile import COMPONENTS_SUBDIR, compile_all

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


def release(dist: Path, *, uv: str, changelog: Path = ROOT / "CHANGELOG.md") -> dict:
    """Checks, builds and writes the release into ``dist``; returns its manifest."""
    version, image = __version__, component_image()
    problems = release_problems(version, image, changelog.read_text())
    if problems:
        raise UserInputError("cannot release:\n  - " + "\n  - ".join(problems))
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dist, prefix=".staging-") as tmp:
        staging = Path(tmp)
        files = [_build_wheel(staging, version, uv), *_compile(staging, version)]
        manifest = {
            "version": version,
            "image": image,
            "files": {str(p.relative_to(staging)): _sha256(p) for p in files},
        }
        (staging / f"release-{version}.json").write_text(json.dumps(manifest, indent=2) + "\n")
        for path in sorted(staging.rglob("*")):
            if path.is_file():
                target = dist / path.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fmnist.app.release",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="where the release goes")
    parser.add_argument("--uv", default=shutil.which("uv") or str(ROOT / ".tools/bin/uv"),
                        help="the uv that builds the wheel")
    parser.add_argument("--changelog", default=str(ROOT / "CHANGELOG.md"))
    args = parser.parse_args(argv)
    try:
        manifest = release(Path(args.dist), uv=args.uv, changelog=Path(args.changelog))
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"released {manifest['version']} (image {manifest['image']}) into {args.dist}:")
    for name, digest in manifest["files"].items():
        print(f"  {name}  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
