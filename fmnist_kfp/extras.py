"""The optional parts of the install, pyproject.toml's extras, as the installed package's own
metadata declares them (hatchling writes each extra out in full, ``fmnist-kfp[training]``
expanded): which of an extra's distributions are missing here, and the error that names the
extra a command needs instead of an ImportError deep inside it."""

from __future__ import annotations

from importlib import metadata

from fmnist_kfp.errors import MissingExtraError

DISTRIBUTION = "fmnist-kfp"


def missing(extra: str) -> list[str]:
    """The distributions ``extra`` installs on this Python that are not installed; empty where
    this package runs from a source tree without installed metadata (nothing to go by)."""
    from packaging.requirements import Requirement

    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    absent = set()
    for requirement in map(Requirement, requires):
        marker = requirement.marker
        # The extra's own lines: true with this extra and false without one (a base line with
        # a python_version marker is true either way).
        if marker is None or not marker.evaluate({"extra": extra}) or marker.evaluate(
                {"extra": ""}):
            continue
        try:
            metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            absent.add(requirement.name)
    return sorted(absent)


def require(extra: str, command: str) -> None:
    """Raises :class:`MissingExtraError` unless everything ``extra`` installs is installed."""
    absent = missing(extra)
    if absent:
        raise MissingExtraError(
            f"`{command}` needs the `{extra}` extra: pip install '{DISTRIBUTION}[{extra}]' "
            f"(not installed: {', '.join(absent)})")
