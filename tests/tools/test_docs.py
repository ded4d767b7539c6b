"""The generated documentation (``make readme``, :mod:`tools.docs`): every generated file is
what the code says now, and the pieces it is written from read the docstrings and links as a
reader of the site needs them."""

from __future__ import annotations

from tests import ROOT
from tools.docs import REPOSITORY, expected_files, first_sentence, index_page


def test_generated_readmes_and_tables_are_current():
    """On failure run `make readme` and commit the result."""
    for path, text in expected_files().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: run `make readme`"


def test_a_summary_ends_at_the_first_sentence_outside_code_and_abbreviations():
    assert first_sentence("Reads `a.b` files, e.g. the split. Then more.") == (
        "Reads `a.b` files, e.g. the split.")
    assert first_sentence("`fmnist-kfp preflight`: what a cluster lacks") == (
        "`fmnist-kfp preflight`")
    assert first_sentence("No full stop at all") == "No full stop at all"


def test_the_front_page_links_into_the_site_or_the_repository():
    page = index_page("[a](docs/cluster.md#x) [b](kfp_components/train/) [c](bench/README.md) "
                      "[d](#usage) [e](https://example.com)")
    assert "[a](cluster.md#x)" in page
    assert f"[b]({REPOSITORY}/tree/main/kfp_components/train/)" in page
    assert f"[c]({REPOSITORY}/blob/main/bench/README.md)" in page
    assert "[d](#usage)" in page and "[e](https://example.com)" in page
    assert page.startswith("<!-- Generated from README.md")
