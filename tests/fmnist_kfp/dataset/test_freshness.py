"""The freshness window (ingestion's cache key): stable inside a window, new after it, and a
clock a test pins through its one variable, read by a kfp.local step too."""

import pytest

from fmnist_kfp.dataset.freshness import freshness_window
from fmnist_kfp.errors import UserInputError


def test_freshness_window_is_stable_inside_a_window_and_changes_after_it():
    start = 1_800_000_000 - (1_800_000_000 % 3600)  # the start of an hour
    inside = {freshness_window("1h", start + offset) for offset in (0, 60, 3599)}
    assert len(inside) == 1
    assert freshness_window("1h", start + 3600) not in inside
    # A different freshness is a different cache key even at the same instant.
    assert freshness_window("2h", start) != freshness_window("1h", start)


def test_the_clock_is_pinned_by_the_test_only_variable(monkeypatch, capsys):
    """What the end-to-end cache test relies on: the freshness step reads the clock from
    FMNIST_FRESHNESS_NOW when set (kfp.local's steps inherit it), and says so in its log."""
    from fmnist_kfp.dataset.freshness import CLOCK_ENV

    start = 86400 * 20_000
    monkeypatch.setenv(CLOCK_ENV, str(start + 10))
    assert freshness_window("24h") == "24h#20000"
    assert CLOCK_ENV in capsys.readouterr().err
    monkeypatch.setenv(CLOCK_ENV, str(start + 86400))
    assert freshness_window("24h") == "24h#20001"
    capsys.readouterr()
    monkeypatch.delenv(CLOCK_ENV)
    assert freshness_window("24h") != "24h#20001"  # the real clock again (it is not 2024)
    assert not capsys.readouterr().err


@pytest.mark.parametrize("value", ["tomorrow", "-5", "nan", "inf"])
def test_a_bad_pinned_clock_names_the_variable(monkeypatch, value):
    from fmnist_kfp.dataset.freshness import CLOCK_ENV

    monkeypatch.setenv(CLOCK_ENV, value)
    with pytest.raises(UserInputError, match=f"{CLOCK_ENV}=.* is not a time in Unix seconds"):
        freshness_window("24h")


@pytest.mark.timeout(120)
def test_a_kfp_local_step_reads_the_pinned_clock(monkeypatch, tmp_path):
    """The mechanism the pipeline test relies on, through kfp.local itself: the freshness
    component runs in a subprocess that inherits FMNIST_FRESHNESS_NOW, so the window moves
    with the pinned clock alone (same 24h setting) and stays put while the clock does."""
    from kfp import local

    from fmnist_kfp.dataset.freshness import CLOCK_ENV
    from fmnist_kfp.kfp_components.freshness import freshness_window as component

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path),
               enable_caching=False)
    windows = []
    for seconds in (86400 * 20_000 + 60, 86400 * 20_001 - 60, 86400 * 20_001 + 60):
        monkeypatch.setenv(CLOCK_ENV, str(seconds))
        windows.append(component(freshness="24h").output)
    assert windows == ["24h#20000", "24h#20000", "24h#20001"]
