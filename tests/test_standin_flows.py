"""The steps' cluster flows, compact, against the API stand-ins: what they send to the API
server is what ``preflight`` checks and what the roles grant (permissions derived, not listed),
and, all but train, they get through the stand-ins' fault mode
(``tests.standins.loopback.FaultMode``: latency, transient 409/429/5xx, reads that time out)
with three seeds. The train step's jobs get through faults on the real API server and the real
operators instead (tests/fmnist_kfp/launcher/test_faults_on_the_cluster.py, through
localcluster/fault_proxy.py); its flow here only records what it sends.

Each flow drives a step's cluster code as the step runs it, with the stand-ins' helpers of the
step's own tests, in the pipeline's order, on the cluster ``kubernetes.operator`` names
(:data:`CLUSTERS`): tune (the Katib launcher, trials of the operator it chooses: an Experiment
that succeeds, one past the step's deadline, deleted), train (the operator chosen as the step
chooses it, then its launcher: a job that succeeds, one that fails and is deleted; its
Tensorboard), batch-predict (an Indexed Job that fails and is deleted), deploy in both modes (a
first model created, a better one promoted: through a canary in Serverless, a candidate
InferenceService in Standard), serve_early (two promotions). Outcomes only are asserted: under
faults the logs legitimately differ."""

from __future__ import annotations

import pytest

from fmnist_kfp.preflight import OPTIONAL_READS, PERMISSIONS, permissions_for
from fmnist_kfp.preflight.permissions import TRAINJOB_PERMISSIONS
from tests.kubeflow_roles import kubeflow_profile
from tests.setup_manifests import build
from tests.standins.kserve import KServeStandIn
from tests.standins.loopback import FaultMode, faults, recording

# The clusters the flows run on, by ``kubernetes.operator``: the Training Operator v1 alone
# (Kubeflow 1.11 with it installed), Trainer v2 and no TFJob CRD (Kubeflow 26.03 as it ships),
# both (``auto`` then picks the TFJob); and the job each must make.
CLUSTERS = {"tfjob": {"tfjob_operator": True, "trainer": False},
            "trainjob": {"tfjob_operator": False, "trainer": True},
            "auto": {"tfjob_operator": True, "trainer": True}}
CHOSEN = {"tfjob": "tfjob", "trainjob": "trainjob", "auto": "tfjob"}
OPERATORS = tuple(CLUSTERS)


def train(tmp_path, operator: str = "tfjob") -> None:
    """The train step's cluster path on the cluster ``operator`` names: the operator chosen as
    the step chooses it (:func:`training_operator`, from what the API server serves), then a
    job that succeeds and one whose first worker fails with a bug, deleted."""
    import io
    import json

    from fmnist_kfp.errors import TrainingJobError
    from fmnist_kfp.kfp_components.train.step import training_operator
    from fmnist_kfp.kubernetes.training_operators import ClusterDiscovery
    from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
    from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
    from fmnist_kfp.settings.jobs import KubernetesSettings
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec
    from tests.standins.kubernetes import FakeTime
    from tests.standins.trainer_v2 import TrainerStandIn

    (tmp_path / "model").mkdir(exist_ok=True)  # what the chief leaves when the job succeeds
    (tmp_path / "model" / "result.json").write_text(json.dumps({"model_type": "basic"}))
    spec = TrainingJobSpec(name="fmnist-basic-3f2a9c", config=TrainingConfig(),
                           data_dir="/mnt/fmnist/dataset", num_workers=2,
                           export_dir=str(tmp_path / "model" / "1"),
                           work_dir=str(tmp_path / "model"))
    settings = KubernetesSettings(namespace="kubeflow", operator=operator)
    pods = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                              namespace="kubeflow", pvc_name="fmnist-pvc")
    for failing in (False, True):
        first = {"worker-0": [2], "node-0": [2]} if failing else {}
        with TrainerStandIn(scripts=first, **CLUSTERS[operator]) as standin:
            chosen, shape = training_operator(settings, ClusterDiscovery(standin.api_client()))
            assert chosen == CHOSEN[operator]
            time = FakeTime()  # every wait bounded in fake seconds
            timing = dict(poll_seconds=5, timeout_seconds=600, out=io.StringIO(),
                          request_timeout_seconds=2, clock=time, sleep=time.sleep)
            launcher = (TrainJobLauncher(pods, api_client=standin.api_client(), shape=shape,
                                         **timing) if chosen == "trainjob" else
                        TFJobLauncher(pods, training_client=standin.training_client(),
                                      **timing))
            if not failing:
                assert launcher.run(spec).result == {"model_type": "basic"}
                continue
            with pytest.raises(TrainingJobError):
                launcher.run(spec)
            assert standin.jobs == {} and not standin.trainjobs  # deleted


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


def tune(tmp_path, operator: str = "tfjob") -> None:
    """The tune step's Katib path on the cluster ``operator`` names: trials of the job the
    launcher chooses as the train step does; an Experiment that succeeds, one past the step's
    deadline, deleted."""
    from dataclasses import replace

    from tests.katib import test_katib_launcher as t
    from tests.standins.katib import KatibStandIn, state

    def settings(directory):
        found = t._settings(directory)
        return replace(found, kubernetes=replace(found.kubernetes, operator=operator))

    with KatibStandIn(t.PROGRESS, [t.FIRST, t.BEST, t.STOPPED, t.BROKEN],
                      **CLUSTERS[operator]) as standin:
        result = t._launcher(standin).run(settings(tmp_path / "a"), t._space(), t.DATA_DIR)
        [experiment] = standin.posts()
    assert result is not None
    kind = experiment["spec"]["trialTemplate"]["trialSpec"]["kind"]
    assert kind == {"tfjob": "TFJob", "trainjob": "TrainJob"}[CHOSEN[operator]]
    with KatibStandIn([state("Running", running=3)], **CLUSTERS[operator]) as standin:
        with pytest.raises(TimeoutError):
            t._launcher(standin, timeout_seconds=100).run(settings(tmp_path / "b"),
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
        assert first.action == "created"
        second = t.deploy(standin, t.NEW, 0.95, needs_credentials=True,
                         service_account="fmnist-serving")
        assert second.action == "promoted", second.reason


def serve_early(lag: int = 1) -> None:
    from tests.serving.deploy import test_kserve_promotion as t

    with KServeStandIn(lag=lag) as standin:
        assert t._promote(standin, t.WORSE, "basic").action == "created"
        assert t._promote(standin, t.BETTER, "batchnorm").action == "promoted"


def every_flow(tmp_path, lag: int = 1, operator: str = "tfjob", with_train: bool = True) -> None:
    """Every step's cluster flow, in the pipeline's order. ``lag``: the KServe controller's
    reconcile lag, in reads (tests/standins/kserve.py); ``operator``: the train and tune steps'
    ``kubernetes.operator`` and the cluster it runs on (:data:`CLUSTERS`); ``with_train``
    False: without the train step's (under faults, tested on the real cluster instead)."""
    for name in ("train", "tune", "batch"):
        (tmp_path / name).mkdir(exist_ok=True)
    tune(tmp_path / "tune", operator)
    if with_train:
        train(tmp_path / "train", operator)
    tensorboard()
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
    """What the flows sent on a cluster with Trainer v2 and no TFJob CRD, with
    ``kubernetes.operator`` trainjob."""
    with recording() as found:
        every_flow(tmp_path_factory.mktemp("flows-trainjob"), operator="trainjob")
    return {attributes[:4] for attributes in found}


def test_the_recorded_api_calls_are_exactly_what_preflight_checks(recorded):
    checked = {(verb, group, resource, sub) for verb, group, resource, sub, _ in PERMISSIONS}
    needed = recorded - set(OPTIONAL_READS)
    assert needed == checked, (f"sent but not checked: {sorted(needed - checked)}; checked "
                               f"but never sent: {sorted(checked - needed)}")


def test_the_trainjob_paths_calls_are_what_preflight_checks_for_it(recorded_trainjob):
    """On a cluster with Trainer v2 and no TFJob CRD, ``permissions_for("trainjob")`` (what
    ``preflight --operator trainjob`` checks) is what the flows sent there: the TrainJob's
    rows in place of the TFJob's, the other steps' unchanged."""
    checked = {(verb, group, resource, sub)
               for verb, group, resource, sub, _ in permissions_for("trainjob")}
    needed = recorded_trainjob - set(OPTIONAL_READS)
    assert needed == checked, (f"sent but not checked: {sorted(needed - checked)}; checked "
                               f"but never sent: {sorted(checked - needed)}")
    assert not {a for a in recorded_trainjob if a[2] == "tfjobs"}  # none could be made
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


@pytest.mark.parametrize(("kubeflow", "operator"), [
    (kubeflow, operator) for kubeflow in ("v1.11.0", "26.03")
    for operator in ("tfjob", "trainjob")])
def test_kubeflows_roles_grant_every_recorded_call(recorded, recorded_trainjob, kubeflow,
                                                   operator):
    """A profile's default-editor, bound to kubeflow-edit (tests/kubeflow_roles: the roles the
    support matrix's Kubeflow releases aggregate into it), may make every call the flows make
    on the cluster ``operator`` names. "tfjob": the TFJob flows' calls (``recorded``) on the
    tag's example install with the Training Operator v1 installed from the same tag, as
    docs/first-run.md step 1 does (its overlay's kubeflow-training-edit added). "trainjob":
    the TrainJob flows' calls (``recorded_trainjob``) on the example install as it ships
    (Trainer v2's kubeflow-trainer-edit; no Training Operator)."""
    calls = {"tfjob": recorded, "trainjob": recorded_trainjob}[operator]
    with KServeStandIn(rbac=True) as standin:
        kubeflow_profile(standin, "team-a", kubeflow, training_operator=operator == "tfjob")
        refused = sorted(a for a in calls - set(OPTIONAL_READS)
                         if not _allowed(standin, "default-editor", "team-a", a))
    assert not refused


# Seeds whose faults reached the serving writes before they retried transient answers (seed 11:
# a 429 on the ServingRuntime create; seed 33: a 504 on the claim ConfigMap's update).
SEEDS = (11, 22, 33)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "operator"), list(zip(SEEDS, OPERATORS, strict=True)))
def test_every_flow_gets_through_the_fault_mode(seed, operator, tmp_path):
    """Each seed on another cluster: the Training Operator v1's, Trainer v2's with no TFJob
    CRD (``kubernetes.operator`` trainjob), and one with both (``auto``: tune's trials are
    TFJobs). The train flow is not run here: its jobs get through faults on the real API
    server (tests/fmnist_kfp/launcher/test_faults_on_the_cluster.py)."""
    with faults(seed) as mode:
        every_flow(tmp_path, lag=3, operator=operator, with_train=False)
    assert mode.injected  # faults were given


def test_the_api_server_stand_in_refuses_a_body_of_another_kind_or_version():
    """As the API server's decoder does (kubernetes/apiserver v0.33.9
    pkg/endpoints/handlers/create.go lines 127-147, update.go lines 114-134): a write whose
    body names another version or kind than its URL is a 400, never stored."""
    import httpx

    with KServeStandIn() as standin:
        url = f"{standin.url}/api/v1/namespaces/kubeflow/configmaps"
        good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
        assert httpx.post(url, json=good).status_code == 201
        wrong = [({"kind": "configmap"}, 'no kind "configmap" is registered for version "v1"'),
                 ({"apiVersion": "V1"}, "the API version in the data (V1) does not match the "
                                        "expected API version (v1)")]
        for change, message in wrong:
            answer = httpx.post(url, json={**good, **change, "metadata": {"name": "b"}})
            assert (answer.status_code, answer.json()["message"]) == (400, message)
            stored = httpx.get(f"{url}/a").json()
            answer = httpx.put(f"{url}/a", json={**stored, **change})
            assert (answer.status_code, answer.json()["message"]) == (400, message)
        assert httpx.get(f"{url}/b").status_code == 404


def test_the_fault_mode_answers_409_conflict_to_updates_only():
    """An update can lose an optimistic-concurrency race (kubernetes/apiserver v0.33.9
    pkg/registry/generic/registry/store.go line 733, NewConflict); a create's only 409 is
    AlreadyExists for a name that exists (pkg/storage/etcd3/store.go lines 249-300), which the
    stores answer themselves, so the fault mode never makes one up."""
    path = "/api/v1/namespaces/kubeflow/configmaps/fmnist-claim"
    picks = {method: [FaultMode(seed, rate=1.0, latency=0).decide(method, path)
                      for seed in range(60)] for method in ("POST", "PUT", "GET")}
    assert "conflict" in picks["PUT"]
    assert "conflict" not in picks["POST"] and "conflict" not in picks["GET"]
    assert all(pick is not None for pick in picks["POST"])  # still faulted: another answer
