"""The steps' cluster flows, compact: what they send to the API server is what ``preflight``
checks and what the roles grant (permissions derived, not listed), and, all but train, they get
through faults with three seeds.

Each flow drives a step's cluster code as the step runs it, in the pipeline's order. On the
stand-ins (``tests.standins.loopback.FaultMode`` their faults: latency, transient 409/429/5xx,
reads that time out): tune (the Katib launcher, on the cluster ``kubernetes.operator`` names,
:data:`CLUSTERS`: trials of the operator it chooses, an Experiment that succeeds, one past the
step's deadline, deleted), deploy in both modes (a first model created, a better one promoted:
through a canary in Serverless, a candidate InferenceService in Standard), serve_early (two
promotions). On the real cluster (tests/cluster.py), through localcluster/fault_proxy.py (a
recorder without a seed, the seed's faults with one): train (the operator chosen as the step
chooses it, then its launcher: a job that succeeds, one that fails and is deleted; its jobs
get through faults in tests/fmnist_kfp/launcher/test_faults_on_the_cluster.py), its
Tensorboard, batch-predict (an Indexed Job that fails and is deleted). Outcomes only are
asserted: under faults the logs legitimately differ."""

from __future__ import annotations

import pytest

from fmnist_kfp.preflight import OPTIONAL_READS, PERMISSIONS, permissions_for
from fmnist_kfp.preflight.permissions import TRAINJOB_PERMISSIONS
from fmnist_kfp.serving.deploy.rollout_result import Action
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


def on_the_cluster(cluster, operator: str, tmp_path, seed: int | None = None) -> set:
    """The flows that run on the real cluster (tests/cluster.py), in a namespace of their own,
    as the pipeline-runner ServiceAccount through localcluster/fault_proxy.py: train (where
    ``seed`` is None; under faults it is tests/fmnist_kfp/launcher/test_faults_on_the_cluster.py),
    its Tensorboard, batch-predict. ``seed`` None: the proxy only records; else every request
    that follows one without a fault gets one of that seed's. Returns the
    ``request_attributes`` of every request they sent."""
    from localcluster.fault_proxy import FaultProxy
    from tests.standins.loopback import request_attributes

    # Named by the flow, not at random: the seed's faults follow the requests' paths.
    namespace = cluster.step_namespace("", name=f"flows-{operator}-{seed or 'recorded'}")
    try:
        # Rate 1: every request of a key that did not just get one gets a fault (never two in
        # a row), so every first create, read and delete meets one, whatever the timing.
        with FaultProxy(cluster.kubeconfig, seed, rate=1.0, latency=0.02) as proxy:
            configuration = proxy.configuration(cluster.token_for(namespace, "pipeline-runner"))
            if seed is None:
                train(cluster, namespace, configuration, operator, tmp_path / "train")
            tensorboard(cluster, namespace, configuration)
            batch_predict(cluster, namespace, configuration)
    finally:
        cluster.delete_namespace(namespace)
    if seed is not None:
        assert proxy.injected  # faults were given
    return {attributes[:4] for method, path, _ in proxy.requests
            if (attributes := request_attributes(method, path)) is not None}


def train(cluster, namespace: str, configuration, operator: str, tmp_path) -> None:
    """The train step's cluster path: the operator chosen as the step chooses it
    (:func:`training_operator`, from what the API server serves), then a job that succeeds and
    one whose first replica fails with a bug, deleted. Its pods are scripted
    (tests/scripted_pod.py)."""
    import io

    from kubeflow.training import TrainingClient
    from kubernetes.client import ApiClient

    from fmnist_kfp.errors import TrainingJobError
    from fmnist_kfp.kfp_components.train.step import training_operator
    from fmnist_kfp.kubernetes.training_operators import ClusterDiscovery
    from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
    from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
    from fmnist_kfp.settings.jobs import KubernetesSettings
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec
    from tests.cluster import SCRIPTED_IMAGE, leave_scripted_result

    leave_scripted_result(tmp_path / "model")
    settings = KubernetesSettings(namespace=namespace, operator=operator)
    pods = KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace,
                              pvc_name="fmnist-data", cpu="100m", memory="256Mi")
    chosen, shape = training_operator(settings, ClusterDiscovery(ApiClient(configuration)))
    assert chosen == CHOSEN[operator]
    for failing in (False, True):
        name = f"fmnist-basic-{'failing' if failing else 'good'}"
        first = f"{name}-worker-0" if chosen == "tfjob" else f"{name}-node-0-0"
        cluster.script_pods(namespace, {first: {"exits": [2]}} if failing else
                            {"*": {"seconds": 1}})
        spec = TrainingJobSpec(name=name, config=TrainingConfig(),
                               data_dir="/mnt/fmnist/dataset", num_workers=2,
                               export_dir=str(tmp_path / "model" / "1"),
                               work_dir=str(tmp_path / "model"))
        timing = dict(poll_seconds=0.5, timeout_seconds=300, out=io.StringIO())
        launcher = (
            TrainJobLauncher(pods, api_client=ApiClient(configuration), shape=shape, **timing)
            if chosen == "trainjob" else
            TFJobLauncher(pods, training_client=TrainingClient(
                client_configuration=configuration, namespace=namespace, job_kind="TFJob"),
                **timing))
        if not failing:
            assert launcher.run(spec).result == {"model_type": "basic"}
            continue
        with pytest.raises(TrainingJobError):
            launcher.run(spec)
        collection = ("trainer.kubeflow.org/v1alpha1", "trainjobs") if chosen == "trainjob" \
            else ("kubeflow.org/v1", "tfjobs")
        assert cluster.gone(f"/apis/{collection[0]}/namespaces/{namespace}/"
                            f"{collection[1]}/{name}")  # deleted


@pytest.fixture(scope="module")
def training_cluster(real_cluster):
    """The session's real cluster serving both training operators (``auto`` would pick the
    TFJob): the Training Operator v1.9.2, Trainer v2.1.0 with JobSet v0.10.1, our runtime."""
    real_cluster.require_node()
    for operator in ("TRAINING_OPERATOR_V1", "JOBSET_V0_10", "TRAINER_V2_1"):
        real_cluster.install(operator)
    real_cluster.apply_training_runtime()
    return real_cluster


def tensorboard(cluster, namespace: str, configuration) -> None:
    """The train step's Tensorboard: created, then re-attached (a retried step)."""
    from kubernetes.client import ApiClient, CustomObjectsApi

    from fmnist_kfp.kubernetes.runner import RemoteJobRunner
    from fmnist_kfp.kubernetes.tensorboard import (
        API_VERSION,
        PLURAL,
        build_tensorboard,
        ensure_tensorboard,
    )

    name = "fmnist-tb-basic-0123456789"
    manifest = build_tensorboard(name, namespace,
                                 "pvc://fmnist-data/jobs/fmnist-basic-1/tensorboard")
    runner = RemoteJobRunner(poll_seconds=0.2, timeout_seconds=120, log=lambda line: None)
    for _ in range(2):
        ensure_tensorboard(manifest, custom_api=CustomObjectsApi(ApiClient(configuration)),
                           runner=runner)
    assert cluster.read_or_none(f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}")


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


def batch_predict(cluster, namespace: str, configuration) -> None:
    """The batch-predict step's Indexed Job, every pod exiting 1 (tests/scripted_pod.py):
    failed BackoffLimitExceeded by the Job controller, then deleted."""
    from dataclasses import replace

    from kubernetes.client import ApiClient, BatchV1Api

    from fmnist_kfp.batch.indexed_job_scorer import IndexedJobScorer
    from fmnist_kfp.kubernetes.runner import JobFailed, RemoteJobRunner
    from fmnist_kfp.settings.jobs import KubernetesSettings
    from tests.cluster import SCRIPTED_IMAGE
    from tests.fmnist_kfp.batch import test_batch_kubernetes as t

    cluster.script_pods(namespace, {"*": {"exits": [1], "seconds": 0.2}})
    spec = t._spec(model_dir="/mnt/fmnist/model", data_dir="", output_dir="/mnt/fmnist/o")
    scorer = IndexedJobScorer(
        KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace, pvc_name="fmnist-data",
                           cpu="100m", memory="256Mi"),
        batch_api=BatchV1Api(ApiClient(configuration)),
        runner=RemoteJobRunner(poll_seconds=0.2, timeout_seconds=120, log=lambda line: None))
    scorer.remote_spec = lambda s: replace(s, output_dir="/mnt/fmnist/out")  # nothing staged
    with pytest.raises(JobFailed, match="BackoffLimitExceeded"):
        scorer.run(spec)
    assert cluster.gone(f"/apis/batch/v1/namespaces/{namespace}/jobs/{spec.name}")


def _serving(standin) -> None:
    for obj in build("serving-credentials", namespace="kubeflow"):
        standin.put(obj)


def deploy(mode: str, lag: int = 1) -> None:
    from tests.serving.deploy import test_kserve_rollout as t

    with KServeStandIn(default_mode=mode, lag=lag) as standin:
        _serving(standin)
        first = t.deploy(standin, t.OLD, 0.90, needs_credentials=True,
                         service_account="fmnist-serving")
        assert first.action is Action.CREATED
        second = t.deploy(standin, t.NEW, 0.95, needs_credentials=True,
                         service_account="fmnist-serving")
        assert second.action is Action.PROMOTED, second.reason


def serve_early(lag: int = 1) -> None:
    from tests.serving.deploy import test_kserve_promotion as t

    with KServeStandIn(lag=lag) as standin:
        assert t._promote(standin, t.WORSE, "basic").action is Action.CREATED
        assert t._promote(standin, t.BETTER, "batchnorm").action is Action.PROMOTED


def every_flow(tmp_path, lag: int = 1, operator: str = "tfjob") -> None:
    """Every step's cluster flow on the stand-ins, in the pipeline's order (the others:
    :func:`on_the_cluster`). ``lag``: the KServe controller's reconcile lag, in reads
    (tests/standins/kserve.py); ``operator``: the tune step's ``kubernetes.operator`` and the
    cluster it runs on (:data:`CLUSTERS`)."""
    (tmp_path / "tune").mkdir(exist_ok=True)
    tune(tmp_path / "tune", operator)
    deploy("Serverless", lag)
    deploy("RawDeployment", lag)
    serve_early(lag)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, training_cluster) -> set:
    """``(verb, group, resource, subresource)`` of every request the flows sent, with
    ``kubernetes.operator`` tfjob."""
    with recording() as found:
        every_flow(tmp_path_factory.mktemp("flows"))
    return {attributes[:4] for attributes in found} | on_the_cluster(
        training_cluster, "tfjob", tmp_path_factory.mktemp("train"))


@pytest.fixture(scope="module")
def recorded_trainjob(tmp_path_factory, training_cluster) -> set:
    """What the flows sent with ``kubernetes.operator`` trainjob (tune's on a cluster with
    Trainer v2 and no TFJob CRD, as 26.03 ships)."""
    with recording() as found:
        every_flow(tmp_path_factory.mktemp("flows-trainjob"), operator="trainjob")
    return {attributes[:4] for attributes in found} | on_the_cluster(
        training_cluster, "trainjob", tmp_path_factory.mktemp("train-trainjob"))


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
def test_every_flow_gets_through_the_fault_mode(seed, operator, tmp_path, training_cluster):
    """Each seed on another cluster for the stand-ins' flows: the Training Operator v1's,
    Trainer v2's with no TFJob CRD (``kubernetes.operator`` trainjob), and one with both
    (``auto``: tune's trials are TFJobs); the real cluster's flows through the fault proxy with
    the same seed. The train step's jobs get through faults in
    tests/fmnist_kfp/launcher/test_faults_on_the_cluster.py."""
    with faults(seed) as mode:
        every_flow(tmp_path, lag=3, operator=operator)
    assert mode.injected  # faults were given
    on_the_cluster(training_cluster, operator, tmp_path, seed)


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
