"""Each component's ``metadata.yaml`` (kubeflow/pipelines-components' format, shown in its
README) names the Kubeflow parts it needs from the lowest version docs/cluster.md supports:
the words cannot fall behind the support matrix."""

from __future__ import annotations

import re

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fmnist_kfp.kfp_components.registry import COMPONENTS
from tests import ROOT

# A metadata dependency's name -> its row of docs/cluster.md's support matrix.
MATRIX_ROWS = {"Pipelines": "KFP backend versions", "Trainer": "Kubeflow Trainer",
               "Training Operator": "Training Operator", "Katib": "Katib",
               "KServe": "KServe, Serverless (Knative)"}
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)")


def lowest_supported() -> dict[str, Version]:
    """The first version each row of the support matrix lists (`2.14.x` is 2.14)."""
    cells = {}
    for line in (ROOT / "docs" / "cluster.md").read_text().splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) > 3:
            cells.setdefault(parts[1], parts[2])
    return {name: Version(_VERSION.search(cells[row])[1]) for name, row in MATRIX_ROWS.items()}


def test_every_dependency_starts_at_the_lowest_supported_version():
    lowest = lowest_supported()
    seen = set()
    for folder in COMPONENTS:
        metadata = yaml.safe_load((ROOT / "kfp_components" / folder / "metadata.yaml").read_text())
        for dependency in metadata["dependencies"]["kubeflow"]:
            name, specifier = dependency["name"], SpecifierSet(dependency["version"])
            floor = min(Version(s.version) for s in specifier if s.operator == ">=")
            assert floor == lowest[name], (folder, name, str(specifier), str(lowest[name]))
            assert lowest[name] in specifier, (folder, name)
            seen.add(name)
    assert seen == set(MATRIX_ROWS)


def test_a_step_that_rolls_out_on_kserve_says_so():
    for folder in ("deploy", "promote"):
        metadata = yaml.safe_load((ROOT / "kfp_components" / folder / "metadata.yaml").read_text())
        assert "KServe" in {d["name"] for d in metadata["dependencies"]["kubeflow"]}, folder
