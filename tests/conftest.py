"""Shared fixtures: small synthetic IDX files, their ingested dataset, and the real data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fmnist_kfp.settings.platform import use_tensorflow_env

IN_CI = os.environ.get("CI") == "true"

# As `fmnist-kfp` sets it for what it starts (fmnist_kfp.settings.platform.TENSORFLOW_ENV): the
# tests' own TensorFlow imports and the processes they start run as the product's do.
use_tensorflow_env()

# The training extra installs TensorFlow Datasets on Python 3.11+ only (pyproject.toml).
needs_tfds = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="no tensorflow-datasets on Python 3.10 (pyproject.toml)")


@pytest.fixture(scope="session", autouse=True)
def serving_state_of_the_session(tmp_path_factory):
    """Local model servers a test starts without choosing a state directory live in the
    session's own (one per test worker), never in the user's ``~/.cache``."""
    name = "FMNIST_SERVING_STATE_DIR"  # fmnist_kfp.serving.deploy.local_deployer.STATE_DIR_ENV
    if os.environ.get(name):
        yield
        return
    os.environ[name] = str(tmp_path_factory.mktemp("serving-state"))
    try:
        yield
    finally:
        os.environ.pop(name, None)


@pytest.fixture(scope="session")
def synthetic_idx(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A directory with the four IDX files (2,000 train / 500 test) and their sha256."""
    from tests.fixtures import make_synthetic_idx_dir  # numpy: `make install-check` has none

    directory = tmp_path_factory.mktemp("idx")
    return directory, make_synthetic_idx_dir(directory)


@pytest.fixture(scope="session")
def synthetic_dataset(synthetic_idx, tmp_path_factory) -> Path:
    """The synthetic IDX files ingested into TFRecord shards (200 of the 2,000 training
    images set aside as the validation split)."""
    from fmnist_kfp.dataset.ingest import ingest

    directory, checksums = synthetic_idx
    out = tmp_path_factory.mktemp("dataset")
    ingest(str(directory), str(out), expected_sha256=checksums, validation_examples=200)
    return out


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The real Fashion-MNIST (``$FASHION_MNIST_DIR``). Missing data skips locally, fails in CI."""
    value = os.environ.get("FASHION_MNIST_DIR", "")
    if value and (Path(value) / "train-images-idx3-ubyte.gz").exists():
        return Path(value)
    message = "real Fashion-MNIST not found: set FASHION_MNIST_DIR to the four official IDX files"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def export_untrained_model(directory: Path, seed: int) -> Path:
    """An exported CNN with random weights, in the training step's layout (``<dir>/1``)."""
    import tensorflow as tf

    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.export import export_saved_model
    from fmnist_kfp.training.models import build_model

    tf.keras.utils.set_random_seed(seed)
    export_saved_model(build_model(TrainingConfig(model_type="basic")), str(directory / "1"))
    return directory


@pytest.fixture(scope="session")
def exported_model(tmp_path_factory) -> Path:
    """An exported CNN (untrained weights: for tests about serving, not accuracy)."""
    return export_untrained_model(tmp_path_factory.mktemp("model"), seed=7)


# `make test` runs the suite in two worker processes (pytest-xdist, --dist loadgroup). A unit of
# work goes whole to one worker: by default a test module (its module fixtures built once);
# the tests of a costly shared fixture together (built once, not once per worker); and each
# slow test of EACH_SLOW_TEST_ALONE on its own, since they share nothing costly and one module
# of them would keep a worker busy for many minutes. The heaviest units start first, so that
# neither worker is left with a long one at the end.
SHARED_FIXTURES = ("real_run", "trained_model", "wheel")
EACH_SLOW_TEST_ALONE = frozenset({
    "tests/pipelines/test_pipeline.py",
    "tests/fmnist_kfp/launcher/test_parameter_server.py",
    "tests/kfp_components/test_cluster_steps.py",
    "tests/serving/deploy/test_kserve_end_to_end.py",
    "tests/serving/deploy/test_local_deploy.py",
})
SLOW_TEST_WEIGHT = 60  # a slow test against a quick one, roughly, in seconds


def work_unit(item: pytest.Item) -> str:
    """The group of ``item`` when the suite runs in several workers (see above)."""
    shared = next((name for name in SHARED_FIXTURES if name in item.fixturenames), None)
    module = item.nodeid.split("::")[0]
    if shared:
        return shared
    if module in EACH_SLOW_TEST_ALONE and item.get_closest_marker("slow"):
        return f"{module}::{item.name}".replace("@", "_")  # "@" ends xdist's group suffix
    return module


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", "no") == "no":
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        unit = work_unit(item)
        item.add_marker(pytest.mark.xdist_group(unit))
        units.setdefault(unit, []).append(item)

    def weight(unit: list[pytest.Item]) -> int:
        return sum(SLOW_TEST_WEIGHT if i.get_closest_marker("slow") else 1 for i in unit)

    items[:] = [item for unit in sorted(units.values(), key=weight, reverse=True)
                for item in unit]
