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


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory):
    """The real control plane (tests/cluster.py), started once for the tests that share it."""
    from tests.cluster import start_real_cluster

    plane, cluster = start_real_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield cluster
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def real_cluster_trainer_2_2(tmp_path_factory):
    """A second control plane whose node runs Kubeflow Trainer v2.2.0 with JobSet v0.11.0
    (Kubeflow 26.03.1), both installed (one node runs one version of each image), and the
    Training Operator and Kueue v0.19.2, which the Kueue tests install. Its tests are a work
    unit of their own (``SHARED_FIXTURES``), so this starts once, and they run beside
    ``real_cluster``'s on the other worker."""
    from tests.cluster import TRAINER_2_2, TRAINER_2_2_NODE, start_real_cluster

    plane, cluster = start_real_cluster(tmp_path_factory.mktemp("trainer-2.2"),
                                        TRAINER_2_2_NODE)
    try:
        cluster.require_node()
        for operator in TRAINER_2_2:
            cluster.install(operator)
        yield cluster
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def whole_path_cluster(katib_cluster):
    """The Katib cluster with KServe v0.16.0 (Kubeflow 26.03's) installed too: every program
    the whole pipeline calls on."""
    katib_cluster.install("KSERVE_V0_16")
    return katib_cluster


@pytest.fixture(scope="session")
def katib_cluster(real_cluster_trainer_2_2):
    """The Trainer 2.2 cluster with the Training Operator, our TensorFlow runtime and Katib
    v0.19.0, installed in that order (Katib watches the trial kinds served when it starts)."""
    cluster = real_cluster_trainer_2_2
    cluster.install("TRAINING_OPERATOR_V1")
    cluster.apply_training_runtime()
    cluster.install("KATIB_V0_19")
    return cluster


# Kubeflow on a real API server, for preflight and the operator choice (tests/fmnist_kfp/
# preflight/on_the_api_server.py): one server, in one of its shapes for each test.
@pytest.fixture(scope="session")
def kubeflow_api_server(tmp_path_factory):
    """The real API server with a Kubeflow 1.11 install and the README's setup (tests/
    fmnist_kfp/preflight/on_the_api_server.py), started once for the tests that share it."""
    from tests.fmnist_kfp.preflight.on_the_api_server import start

    kubeflow = start(tmp_path_factory.mktemp("kubeflow-api-server"))
    try:
        yield kubeflow
    finally:
        kubeflow.plane.stop()


def _kubeflow(server, shape: str, monkeypatch, tmp_path):
    """(the install on the real API server in ``shape``, the KFP API stand-in), with no
    credentials Secret or PVC name set; what the test changed there is undone after it."""
    from tests.fmnist_kfp.preflight import on_the_api_server

    server.use_shape(shape, on_the_api_server.SHAPES[shape])
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    try:
        from tests.standins.kfp import KfpStandIn

        with KfpStandIn() as kfp:
            yield server, kfp
    finally:
        server.restore()


@pytest.fixture
def kubeflow(kubeflow_api_server, monkeypatch, tmp_path):
    """Kubeflow 1.11 after the README's setup, on the real API server (``_kubeflow``)."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 1.11", monkeypatch, tmp_path)


@pytest.fixture
def kubeflow_2603(kubeflow_api_server, monkeypatch, tmp_path):
    """A stock Kubeflow 26.03 after the README's setup, on the real API server (``_kubeflow``):
    Trainer v2.1.0 and JobSet v0.10.1 installed, no Training Operator v1 (its example install
    leaves it out: kubeflow/manifests 26.03 example/kustomization.yaml lines 90-93), and
    ``kubectl apply -k manifests/trainer-runtime``."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 26.03", monkeypatch, tmp_path)


@pytest.fixture
def kubeflow_and_trainer(kubeflow_api_server, monkeypatch, tmp_path):
    """Kubeflow 1.11 after the README's setup with Trainer v2 beside the Training Operator v1,
    and ``kubectl apply -k manifests/trainer-runtime``, on the real API server
    (``_kubeflow``)."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 1.11 and Trainer v2", monkeypatch,
                         tmp_path)


@pytest.fixture
def kubeflow_and_volcano(kubeflow_api_server, monkeypatch, tmp_path):
    """Kubeflow 1.11 after the README's setup with Volcano's CRDs, its default queue Open, the
    training operator run with --gang-scheduler-name=volcano and manifests/scheduling's
    PriorityClass, on the real API server (``_kubeflow``)."""
    yield from _kubeflow(kubeflow_api_server, "Kubeflow 1.11 and Volcano", monkeypatch,
                         tmp_path)


# `make test` runs the suite in two worker processes (pytest-xdist). A unit of work goes whole
# to one worker: by default a test module (its module fixtures built once); the tests of a
# costly shared fixture together (built once, not once per worker); and each slow test of
# EACH_SLOW_TEST_ALONE on its own, since they share nothing costly and one module of them would
# keep a worker busy for many minutes. The heaviest units start first, so that neither worker
# is left with a long one at the end. (xdist's own loadgroup marks a test's group by editing its
# node id, which pytest 9 no longer reads: so each worker writes its units to a file that the
# scheduler below reads.)
SHARED_FIXTURES = ("real_run", "trained_model", "wheel", "real_cluster_trainer_2_2",
                   "real_cluster", "kubeflow_api_server")
EACH_SLOW_TEST_ALONE = frozenset({
    "tests/pipelines/test_pipeline.py",
    "tests/fmnist_kfp/launcher/test_parameter_server.py",
    "tests/kfp_components/test_cluster_steps.py",
    "tests/serving/deploy/test_kserve_end_to_end.py",
    "tests/serving/deploy/test_local_deploy.py",
    "tests/fmnist_kfp/test_no_traceback.py",
})
SLOW_TEST_WEIGHT = 60  # a slow test against a quick one, roughly, in seconds
WORK_UNITS_ENV = "FMNIST_TEST_WORK_UNITS"  # the file the workers write their units to


def work_unit(item: pytest.Item) -> str:
    """The unit of work of ``item`` when the suite runs in several workers (see above); a test
    that reaches its shared fixture through ``request.getfixturevalue`` names it with the
    ``work_unit`` mark."""
    marked = item.get_closest_marker("work_unit")
    if marked:
        return marked.args[0]
    shared = next((name for name in SHARED_FIXTURES if name in item.fixturenames), None)
    module = item.nodeid.split("::")[0]
    if shared:
        return shared
    if module in EACH_SLOW_TEST_ALONE and item.get_closest_marker("slow"):
        return item.nodeid
    return module


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin("xdist") and not hasattr(config, "workerinput") \
            and config.getoption("numprocesses", None):
        import tempfile

        handle, path = tempfile.mkstemp(prefix="fmnist-test-units-", suffix=".json")
        os.close(handle)
        os.environ[WORK_UNITS_ENV] = path  # the workers, started after this, inherit it


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # only in an xdist worker
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(work_unit(item), []).append(item)

    def weight(unit: list[pytest.Item]) -> int:
        return sum(SLOW_TEST_WEIGHT if i.get_closest_marker("slow") else 1 for i in unit)

    items[:] = [item for unit in sorted(units.values(), key=weight, reverse=True)
                for item in unit]
    import json

    worker_file = f"{os.environ[WORK_UNITS_ENV]}.{config.workerinput['workerid']}"
    with open(worker_file + ".part", "w") as handle:
        json.dump({item.nodeid: unit for unit, its in units.items() for item in its}, handle)
    os.replace(worker_file + ".part", worker_file)  # whole, or not there


def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(WORK_UNITS_ENV)
    if path and not hasattr(config, "workerinput"):
        import glob

        for leftover in [path, *glob.glob(path + ".*")]:
            os.remove(leftover)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist, the suite runs in one process
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        """xdist's scope scheduling, a scope being a work unit of ``work_unit``."""

        units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:  # every worker has collected (and written) by now
                import glob
                import json

                [first, *_] = sorted(glob.glob(os.environ[WORK_UNITS_ENV] + ".gw*"))
                with open(first) as handle:
                    self.units = json.load(handle)
            return self.units[nodeid]

    return WorkUnitScheduling(config, log)
