"""The documentation: a README a user reads in five minutes, and the MkDocs site under docs/,
built with ``mkdocs build --strict`` (every page in the nav, every link and anchor resolving)
offline. The generated parts are checked by tests/fmnist_kfp/settings/test_settings.py, the
examples by the tests that run them (test_cluster_client.py, test_compiled_components.py,
test_first_run.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_stays_short():
    assert README.stat().st_size <= 10 * 1024, (
        f"README.md is {README.stat().st_size} bytes; move detail into docs/")


def test_the_readmes_links_resolve():
    """GitHub renders README.md from the repository root (and PyPI shows it): every relative
    link names a file or folder that exists, and an anchor into docs/ names a heading there."""
    text = README.read_text()
    headings = {}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {target}, which does not exist"
        if anchor and path.endswith(".md"):
            if path not in headings:
                lines = (ROOT / path).read_text().splitlines()
                headings[path] = {_slug(line.lstrip("#")) for line in lines
                                  if re.match(r"#{1,6} ", line)}
            assert anchor in headings[path], f"README.md links to {target}: no such heading"


def _slug(heading: str) -> str:
    """The anchor GitHub and MkDocs (toc's default slugify) give a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().replace("`", "").lower())
    return re.sub(r"[\s]+", "-", text)


def test_the_site_builds_strictly_and_offline(tmp_path):
    """``mkdocs build --strict``: a broken link or anchor, a page missing from the nav, or any
    other warning fails it. No network: no plugin may download at build time."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True
    assert config["theme"]["name"] == "material" and config["theme"]["font"] is False
    assert [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]] == ["search"]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HTTP_PROXY": "http://127.0.0.1:9",
           "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-5000:]
    assert "WARNING" not in done.stderr, done.stderr[-5000:]
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    built = {p.parent.name for p in (tmp_path / "site").glob("*/index.html")}
    assert pages - {"index"} <= built, pages - built


def test_every_upstream_pointer_in_the_code_names_a_section_of_docs_upstream():
    """Module docstrings point at their upstream sources as ``upstream:
    docs/upstream.md#<section>[, #<section>]``; each section exists."""
    page = (ROOT / "docs" / "upstream.md").read_text().splitlines()
    sections = {_slug(line.lstrip("#")) for line in page if re.match(r"#{1,6} ", line)}
    pointers = {}
    for package in ("fmnist", "katib", "serving", "kfp_components", "pipelines"):
        for path in (ROOT / package).rglob("*.py"):
            for match in re.finditer(r"upstream: docs/upstream\.md(#[\w-]+(?:, #[\w-]+)*)",
                                     path.read_text()):
                for anchor in match[1].split(", "):
                    pointers.setdefault(anchor.lstrip("#"), []).append(
                        path.relative_to(ROOT).as_posix())
    assert pointers, "no module points at docs/upstream.md"
    missing = {anchor: where for anchor, where in pointers.items() if anchor not in sections}
    assert not missing, missing
