"""The steps' cluster flows, compact, against the API stand-ins: what they send to the API
server is what ``preflight`` checks and what the roles grant (permissions derived, not listed),
and they get through the stand-ins' fault mode (``tests.standins.loopback.FaultMode``: latency,
transient 409/429/5xx, reads that time out) with three seeds.

Each flow drives a step's cluster code as the step runs it, with the stand-ins' helpers of the
step's own tests: train (the TFJob launcher: a job that succeeds, one that fails and is deleted;
its Tensorboard), tune (the Katib launcher: an Experiment that succeeds, one past the step's
deadline, deleted), deploy in both modes (a first model created, a better one promoted: through a
canary in Serverless, a candidate InferenceService in Standard), serve_early (two promotions),
batch-predict (an Indexed Job that fails and is deleted). Outcomes only are asserted: under
faults the logs legitimately differ."""

from __future__ import annotations

import pytest

from fmnist_kfp.preflight import OPTIONAL_READS, PERMISSIONS, permissions_for
from fmnist_kfp.preflight.permissions import TRAINJOB_PERMISSIONS
from tests.kubeflow_roles import kubeflow_profile
from tests.setup_manifests import build
from tests.standins.kserve import KServeStandIn
from tests.standins.loopback import faults, recording


def train(tmp_path) -> None:
    from fmnist_kfp.errors import TrainingJobError
    from tests.fmnist_kfp.launcher import test_kubernetes_launcher as t
    from tests.standins.kubernetes import KubernetesStandIn

    t._finish(tmp_path)
    with KubernetesStandIn() as standin:
        outcome = t._launcher(standin).run(t._spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    with KubernetesStandIn(scripts={"worker-0": [2]}) as standin:
        with pytest.raises(TrainingJobError):
            t._launcher(standin).run(t._spec(tmp_path))
        assert standin.jobs == {}  # deleted


def train_trainjob(tmp_path) -> None:
    """The train step's TrainJob path (``kubernetes.operator`` trainjob): one that succeeds, one
    whose node fails with a bug and is deleted."""
    from fmnist_kfp.errors import TrainingJobError
    from tests.fmnist_kfp.launcher import test_trainjob_launcher as t
    from tests.standins.trainer_v2 import TrainerStandIn

    t._finish(tmp_path)
    with TrainerStandIn() as standin:
        outcome = t._launcher(standin).run(t._spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    with TrainerStandIn(scripts={"node-0": [2]}) as standin:
        with pytest.raises(TrainingJobError):
            t._launcher(standin).run(t._spec(tmp_path))
        assert not standin.trainjobs  # deleted


def tensorboard() -> None:
    from fmnist_kfp.kubernetes.tensorboard import build_tensorboard, ensure_tensorboard
    from tests.fmnist_kfp.batch.test_batch_kubernetes import _runner
    from tests.fmnist_kfp.kubernetes.test_tensorboard import tensorboard_schema
    from tests.standins.batch_job import JobStandIn

    manifest = build_tensorboard("fmnist-tb-basic-0123456789", "kubeflow",
                                 "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard")
    with JobStandIn(tensorboard_schema=tensorboard_schema()) as standin:
        for _ in range(2):  # created, then re-attached
            ensure_tensorboard(manifest, custom_api=standin.custom_api(), runner=_runner([]))
        assert ("kubeflow", "fmnist-tb-basic-0123456789") in standin.tensorboards


def tune(tmp_path) -> None:
    from tests.katib import test_katib_launcher as t
    from tests.standins.katib import KatibStandIn, state

    with KatibStandIn(t.PROGRESS, [t.FIRST, t.BEST, t.STOPPED, t.BROKEN]) as standin:
        result = t._launcher(standin).run(t._settings(tmp_path / "a"), t._space(), t.DATA_DIR)
    assert result is not None
    with KatibStandIn([state("Running", running=3)]) as standin:
        with pytest.raises(TimeoutError):
            t._launcher(standin, timeout_seconds=100).run(t._settings(tmp_path / "b"),
                                                          t._space(), t.DATA_DIR)
        assert standin.experiments == {}


def batch_predict(tmp_path) -> None:
    from dataclasses import replace

    from fmnist_kfp.batch.indexed_job_scorer import IndexedJobScorer
    from fmnist_kfp.kubernetes.runner import JobFailed
    from tests.fmnist_kfp.batch import test_batch_kubernetes as t
    from tests.standins.batch_job import JobStandIn

    states = [{"type": "Failed", "reason": "BackoffLimitExceeded", "message": "limit"}]
    mount = tmp_path / "volume"
    (tmp_path / "model").mkdir(exist_ok=True)
    spec = t._spec(model_dir=str(tmp_path / "model"), data_dir="",
                   output_dir=str(tmp_path / "o"))
    with JobStandIn(run_pods=False, states=states) as standin:
        scorer = IndexedJobScorer(t._settings(mount), batch_api=standin.batch_api(),
                                  runner=t._runner([]))
        scorer.remote_spec = lambda s: replace(s, output_dir=str(mount / "out"))
        with pytest.raises(JobFailed, match="BackoffLimitExceeded"):
            scorer.run(spec)
        assert any(call[0] == "DELETE" for call in standin.calls)


def _serving(standin) -> None:
    for obj in build("serving-credentials", namespace="kubeflow"):
        standin.put(obj)


def deploy(mode: str, lag: int = 1) -> None:
    from tests.serving.deploy import test_kserve_rollout as t

    with KServeStandIn(default_mode=mode, lag=lag) as standin:
        _serving(standin)
        first = t.deploy(standin, t.OLD, 0.90, needs_credentials=True,
                         service_account="fmnist-serving")
        assert first["action"] == "created"
        second = t.deploy(standin, t.NEW, 0.95, needs_credentials=True,
                         service_account="fmnist-serving")
        assert second["action"] == "promoted", second["reason"]


def serve_early(lag: int = 1) -> None:
    from tests.serving.deploy import test_kserve_promotion as t

    with KServeStandIn(lag=lag) as standin:
        assert t._promote(standin, t.WORSE, "basic")["action"] == "created"
        assert t._promote(standin, t.BETTER, "batchnorm")["action"] == "promoted"


def every_flow(tmp_path, lag: int = 1, trainjob: bool = False) -> None:
    """``lag``: the KServe controller's reconcile lag, in reads (tests/standins/kserve.py);
    ``trainjob``: the train step's TrainJob path too."""
    for name in ("train", "trainjob", "tune", "batch"):
        (tmp_path / name).mkdir(exist_ok=True)
    train(tmp_path / "train")
    if trainjob:
        train_trainjob(tmp_path / "trainjob")
    tensorboard()
    tune(tmp_path / "tune")
    batch_predict(tmp_path / "batch")
    deploy("Serverless", lag)
    deploy("RawDeployment", lag)
    serve_early(lag)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> set:
    """``(verb, group, resource, subresource)`` of every request the flows sent."""
    with recording() as found:
        every_flow(tmp_path_factory.mktemp("flows"))
    return {attributes[:4] for attributes in found}


@pytest.fixture(scope="module")
def recorded_trainjob(tmp_path_factory) -> set:
    """What the train step's TrainJob path sent (the other steps send the same either way)."""
    with recording() as found:
        train_trainjob(tmp_path_factory.mktemp("trainjob"))
    return {attributes[:4] for attributes in found}


def test_the_recorded_api_calls_are_exactly_what_preflight_checks(recorded):
    checked = {(verb, group, resource, sub) for verb, group, resource, sub, _ in PERMISSIONS}
    needed = recorded - set(OPTIONAL_READS)
    assert needed == checked, (f"sent but not checked: {sorted(needed - checked)}; checked "
                               f"but never sent: {sorted(checked - needed)}")


def test_the_trainjob_paths_calls_are_what_preflight_checks_for_it(recorded_trainjob):
    """``permissions_for("trainjob")`` swaps the TFJob rows for the TrainJob's: what the
    TrainJob flow sent, plus nothing of the TFJob's."""
    checked = {(verb, group, resource, sub)
               for verb, group, resource, sub, _ in TRAINJOB_PERMISSIONS}
    needed = recorded_trainjob - set(OPTIONAL_READS)
    assert needed == checked, (f"sent but not checked: {sorted(needed - checked)}; checked "
                               f"but never sent: {sorted(checked - needed)}")
    assert set(TRAINJOB_PERMISSIONS) <= set(permissions_for("trainjob"))


def _allowed(standin, account: str, namespace: str, attributes) -> bool:
    verb, group, resource, sub = attributes
    return standin._rbac_allows(f"system:serviceaccount:{namespace}:{account}", namespace,
                                verb, group, f"{resource}/{sub}" if sub else resource, "")


def test_the_standalone_role_grants_every_recorded_call(recorded, recorded_trainjob):
    with KServeStandIn(rbac=True) as standin:
        for obj in build("standalone-rbac"):
            standin.put(obj)
        refused = sorted(a for a in (recorded | recorded_trainjob) - set(OPTIONAL_READS)
                         if not _allowed(standin, "pipeline-runner", "kubeflow", a))
    assert not refused


@pytest.mark.parametrize("kubeflow", ["v1.11.0", "26.03"])
def test_kubeflows_roles_grant_every_recorded_call(recorded, kubeflow):
    """A profile's default-editor, bound to kubeflow-edit (tests/kubeflow_roles: the roles the
    support matrix's Kubeflow releases aggregate into it)."""
    with KServeStandIn(rbac=True) as standin:
        kubeflow_profile(standin, "team-a", kubeflow)
        refused = sorted(a for a in recorded - set(OPTIONAL_READS)
                         if not _allowed(standin, "default-editor", "team-a", a))
    assert not refused


# Seeds whose faults reached the serving writes before they retried transient answers (seed 11:
# a 429 on the ServingRuntime create; seed 33: a 504 on the claim ConfigMap's update).
SEEDS = (11, 22, 33)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_every_flow_gets_through_the_fault_mode(seed, tmp_path):
    with faults(seed) as mode:
        every_flow(tmp_path, lag=3, trainjob=True)
    assert mode.injected  # faults were given
