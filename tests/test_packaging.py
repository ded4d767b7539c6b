"""The wheel as PyPI and pip see it: built once (``uv build --wheel``, as the Dockerfile's wheel
stage and the release workflow build it), then its metadata and files read. The description is
README.md with every link and image made absolute (pyproject.toml's fancy-pypi-readme
substitutions: PyPI resolves no relative link); the license text, the project URLs, and one
import package, ``fmnist_kfp``, without the repository's tooling (``tools/``)."""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = "https://github.com/fmnist-kfp/fmnist-kfp"
# A Markdown link's or image's target: ](target) or ](target "title")
_TARGET = re.compile(r"\]\(\s*<?([^)\s>]*)")


def _uv() -> str:
    """The uv `make setup` uses (.tools/bin/uv), else one on the PATH or beside the interpreter."""
    for candidate in (ROOT / ".tools" / "bin" / "uv", Path(sys.executable).parent / "uv"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("uv")
    if not found:
        pytest.skip("uv is not installed (make setup installs it into .tools/)")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    done = subprocess.run([_uv(), "build", "--wheel", "--out-dir", str(out), str(ROOT)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [built] = out.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _dist_info(archive: zipfile.ZipFile) -> str:
    [folder] = {name.split("/")[0] for name in archive.namelist()
                if name.split("/")[0].endswith(".dist-info")}
    return folder


@pytest.fixture(scope="module")
def metadata(wheel) -> email.message.Message:
    return email.message_from_string(wheel.read(f"{_dist_info(wheel)}/METADATA").decode())


def test_the_description_is_the_readme_with_every_link_and_image_absolute(metadata):
    assert metadata["Description-Content-Type"] == "text/markdown"
    description = metadata.get_payload()
    readme = (ROOT / "README.md").read_text()
    # The README's headings, in order: the description is the README, relinked.
    headings = re.findall(r"^#{1,6} .*$", readme, re.MULTILINE)
    assert re.findall(r"^#{1,6} .*$", description, re.MULTILINE) == headings
    relative = [target for target in _TARGET.findall(readme)
                if not target.startswith(("http://", "https://"))]
    assert relative, "README.md has no relative link left to check the substitutions with"
    targets = _TARGET.findall(description)
    assert len(targets) == len(_TARGET.findall(readme))
    wrong = [target for target in targets if not re.match(r"https?://[^/\s]+/", target)]
    assert not wrong, f"relative targets in the PyPI description: {wrong}"
    # Each relative one points at the file in the repository: images at the file itself.
    for target in relative:
        path = target.partition("#")[0]
        if not path:  # an anchor into the README itself
            assert f"{REPOSITORY}/blob/main/README.md{target}" in targets
        elif re.search(r"\.(png|jpe?g|gif|svg)$", path):
            assert f"{REPOSITORY}/raw/main/{target}" in targets
            assert (ROOT / path).is_file(), target
        else:
            assert f"{REPOSITORY}/blob/main/{target}" in targets
            assert (ROOT / path).exists(), target
    # No HTML <img> or <a> sneaks a relative address past the Markdown substitutions.
    for address in re.findall(r"""(?:src|href)=["']([^"']+)""", description):
        assert re.match(r"https?://", address), address


def test_the_wheel_carries_the_license(wheel, metadata):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert metadata["License-Expression"] == pyproject["license"] == "Apache-2.0"
    for name in pyproject["license-files"]:
        assert metadata.get_all("License-File").count(name) == 1
        shipped = wheel.read(f"{_dist_info(wheel)}/licenses/{name}")
        assert shipped == (ROOT / name).read_bytes()
    text = (ROOT / "LICENSE").read_text()
    # The whole Apache License 2.0, not a pointer to it.
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(re.findall(r"^\s+\d\. [A-Z]", text, re.MULTILINE)) == 9  # its nine sections


def test_the_project_urls_point_at_the_repository(metadata):
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Repository", "Documentation", "Issues", "Changelog"}
    for name, url in urls.items():
        assert url.startswith(REPOSITORY), (name, url)
    assert urls["Changelog"].endswith("/CHANGELOG.md") and (ROOT / "CHANGELOG.md").exists()


def test_the_wheel_has_one_import_package(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"fmnist_kfp", _dist_info(wheel)}, tops
    assert "fmnist_kfp/__init__.py" in wheel.namelist()
    # The mapped folders are its subpackages (pyproject.toml's wheel sources).
    for package in ("pipelines", "kfp_components", "katib", "serving"):
        assert f"fmnist_kfp/{package}/__init__.py" in wheel.namelist(), package


def test_the_wheel_carries_no_tooling(wheel):
    """The repository's tooling (tools/: the generated docs, releases) runs from a checkout and
    is not the product: no module of it is in the wheel, under its own name or the package's."""
    tooling = {path.name for path in (ROOT / "tools").glob("*.py")} - {"__init__.py"}
    assert tooling >= {"docs.py", "release.py"}
    shipped = {name.rsplit("/", 1)[-1] for name in wheel.namelist()
               if name.count("/") == 1 and name.startswith("fmnist_kfp/")}
    assert not tooling & shipped, tooling & shipped
    assert not [name for name in wheel.namelist() if name.startswith("tools/")]
