"""Durations as users write them (Go/Argo style or ISO 8601), and the forms a bad one is told."""

import pytest

from fmnist_kfp.durations import parse_duration
from fmnist_kfp.errors import UserInputError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("24h", 86400), ("7d", 604800), ("1h30m", 5400), ("P1D", 86400),
     ("PT2H", 7200), ("90s", 90), ("1.5h", 5400)],
)
def test_parses_go_and_iso_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "3x", "h", "-1h", "0s", "P", "PT", "24 hours", "1d2"])
def test_rejects_unparseable_durations_with_the_accepted_forms(text):
    with pytest.raises(UserInputError, match="'24h'"):
        parse_duration(text)
