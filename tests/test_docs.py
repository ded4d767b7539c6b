"""The documentation: a README a user reads in five minutes, and the MkDocs site under docs/,
built with ``mkdocs build --strict`` (every page in the nav, every link and anchor resolving)
offline. The generated parts are checked by tests/tools/test_docs.py, the
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


# A minimum-version claim in prose: "Kubeflow 1.11 or newer", "standalone KFP 2.16 and later",
# "Kubeflow 1.11+" (the matrix's own table is its source, not a claim).
_CLAIM = re.compile(r"\b(?P<standalone>standalone )?(?P<what>Kubeflow Pipelines|Kubeflow|KFP) "
                    r"v?(?P<version>\d+\.\d+(?:\.\d+)?)(?:\+|,? (?:and|or) (?:newer|later))")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _support_matrix() -> dict[str, list[list[str]]]:
    """docs/cluster.md's support matrix ("What it runs on"): its rows by first cell's kind, the
    one source of every version the docs claim."""
    page = (ROOT / "docs" / "cluster.md").read_text()
    section = page.split("\n## What it runs on\n", 1)[1].split("\n## ", 1)[0]
    table = [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
             for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| ---")]
    header, *rows = table
    assert header == ["component", "version", "works", "does not"], header
    return {
        "kubeflow": [row for row in rows if re.match(r"Kubeflow \d", row[0])],
        "standalone": [row for row in rows if row[0] == "Kubeflow Pipelines standalone"],
    }


def _minimums() -> dict[str, tuple[int, ...]]:
    """The oldest Kubeflow release and the oldest standalone KFP the matrix says run the whole
    pipeline; every Kubeflow release from that one on runs it, none before it does."""
    matrix = _support_matrix()
    releases = [(_version(re.match(r"Kubeflow (\d+\.\d+)", row[0])[1]),
                 row[2].startswith("the whole pipeline")) for row in matrix["kubeflow"]]
    kubeflow = min(version for version, whole in releases if whole)
    assert all(whole == (version >= kubeflow) for version, whole in releases), releases
    [standalone] = matrix["standalone"]
    found = re.fullmatch(r"(\d+\.\d+)\.\d+ or newer", standalone[1])
    assert found and standalone[2].startswith("the whole pipeline"), standalone
    return {"Kubeflow": kubeflow, "standalone KFP": _version(found[1])}


def test_every_minimum_version_the_docs_claim_is_the_support_matrixs():
    """Each "Kubeflow X.Y or newer" / "standalone KFP X.Y or newer" in README.md and docs/ names
    the matrix's minimum (docs/cluster.md, "What it runs on"); a KFP backend minimum elsewhere
    is the one `upload`, `run --host` and `schedule` enforce (test below)."""
    from fmnist_kfp.kfp_client import MIN_BACKEND

    minimums = _minimums()
    claims = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        if page.name == "index.md":  # README.md's generated copy
            continue
        text = re.sub(r"\s+", " ", page.read_text().replace("\n#", " "))
        for match in _CLAIM.finditer(text):
            claims.append(match[0])
            version = _version(match["version"])[:2]
            if match["what"] == "Kubeflow":
                wanted = minimums["Kubeflow"]
            elif match["standalone"]:
                wanted = minimums["standalone KFP"]
            else:
                wanted = MIN_BACKEND[:2]
            assert version == wanted, (
                f"{page.relative_to(ROOT)} says {match[0]!r}; the support matrix "
                f"(docs/cluster.md#what-it-runs-on) says {'.'.join(map(str, wanted))}")
    assert any("standalone KFP" in claim for claim in claims), claims
    assert any(claim.startswith("Kubeflow") for claim in claims), claims


def test_the_backend_minimum_the_commands_enforce_agrees_with_the_support_matrix():
    """``kfp_client.MIN_BACKEND`` (below it `upload`, `run --host` and `schedule` refuse the
    backend) is at most the standalone minimum, at most the KFP of every Kubeflow release that
    runs the pipeline, and above the KFP of every release that runs nothing of it."""
    from fmnist_kfp.kfp_client import MIN_BACKEND

    assert MIN_BACKEND[:2] <= _minimums()["standalone KFP"]
    for row in _support_matrix()["kubeflow"]:
        kfp = [_version(v) for v in re.findall(r"KFP (\d+\.\d+\.\d+)", row[1])]
        assert kfp, row
        if row[2].startswith("the whole pipeline"):
            assert min(kfp) >= MIN_BACKEND, row
        elif row[2].startswith("nothing of the pipeline"):
            assert max(kfp) < MIN_BACKEND, row
