"""The train step's cluster path through the fault proxy (localcluster/fault_proxy.py): the
TFJob launcher on the real Training Operator v1.9.2, and the TrainJob launcher on real Kubeflow
Trainer v2.1.0 and JobSet v0.10.1 with our ClusterTrainingRuntime, each calling the real API
server through a proxy that adds latency and, seeded, answers 429/5xx instead of forwarding,
drops connections, and loses answers to requests it did forward. The launcher runs in the
test's process as the step's ServiceAccount (``pipeline-runner``, manifests/standalone-rbac's
Role: the proxy passes its token through, so the real authorizer judges every call).

Per seed and operator: a job whose trainer exits non-zero (no dataset where it looks) fails
the step and is deleted; then a job of one worker trains for an epoch and the step returns its
result. Outcomes are asserted, and that faults were given; the logs legitimately differ. The
namespaces and job names are fixed, so what the proxy gives each request of a key is the
seed's alone (:func:`test_the_seeds_fault_the_creates`): seed 25's failing TFJob's create is
answered 429 (not applied, retried), its good one's create loses its answer (applied: the retry
is told 409 AlreadyExists and the step re-attaches), and the failed job's delete is dropped;
seed 1 the same on TrainJobs the other way round, the delete answered 500; seed 2's good
TFJob's create is answered 503, and the failed job's delete loses its answer (deleted; urllib3
repeats the DELETE, which the API server answers 404)."""

from __future__ import annotations

import io

import pytest

from localcluster.fault_proxy import FaultProxy
from tests.cluster import until
from tests.localcluster.test_fault_proxy import unreachable_kubeconfig

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0"
STEP_SECONDS = 300
RATE = 0.2
# seed -> the operator its jobs run on; what the proxy gives the failing job's create, the good
# job's create and the failed job's delete (None: forwarded).
SEEDS = {25: ("tfjob", 429, "lost", "drop"), 1: ("trainjob", "lost", 429, 500),
         2: ("tfjob", None, 503, "lost")}
PATHS = {"tfjob": "/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs",
         "trainjob": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs"}


def _namespace(seed: int) -> str:
    return f"faults-{seed}"


@pytest.fixture(scope="module")
def cluster(real_cluster):
    real_cluster.require_node()
    real_cluster.install("TRAINING_OPERATOR_V1")
    real_cluster.install("JOBSET_V0_10")
    real_cluster.install("TRAINER_V2_1")
    real_cluster.apply_training_runtime()
    return real_cluster


def _core(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture
def step(cluster, synthetic_dataset, request):
    """The seed's namespace with the Role's ServiceAccount, a claim holding the dataset, and a
    fault proxy passing the ServiceAccount's token: (namespace, claim directory, proxy,
    token)."""
    seed = request.param
    namespace = _namespace(seed)
    cluster.grant_pipeline_runner(namespace)
    claim = cluster.add_claim(namespace, "fmnist-data", synthetic_dataset)
    token = _core(cluster.api_client).create_namespaced_service_account_token(
        "pipeline-runner", namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    proxy = FaultProxy(cluster.kubeconfig, seed, rate=RATE, latency=0.02).start()
    try:
        yield namespace, claim, proxy, token
    finally:
        proxy.stop()
        cluster.delete_namespace(namespace)


def _launcher(operator: str, namespace: str, claim, proxy: FaultProxy, token: str, out):
    """The step's launcher, its API calls through ``proxy`` as ``token``. The claim is mounted
    in the pods at the path the node keeps it at, so this process reads the result where the
    pods wrote it, as a step pod reads its mount."""
    from fmnist_kfp.settings.jobs import KubernetesSettings

    settings = KubernetesSettings(image=IMAGE, namespace=namespace, pvc_name="fmnist-data",
                                  mount_path=str(claim), cpu="250m", memory="1Gi")
    if operator == "tfjob":
        from kubeflow.training import TrainingClient

        from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher

        client = TrainingClient(client_configuration=proxy.configuration(token),
                                namespace=namespace, job_kind="TFJob")
        return TFJobLauncher(settings, training_client=client, poll_seconds=1,
                             timeout_seconds=STEP_SECONDS, out=out, request_timeout_seconds=30)
    from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher

    return TrainJobLauncher(settings, api_client=proxy.api_client(token), poll_seconds=1,
                            timeout_seconds=STEP_SECONDS, out=out, request_timeout_seconds=30)


def _spec(name: str, claim, data_dir: str):
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    return TrainingJobSpec(name=name, num_workers=1, max_restarts=0,
                           config=TrainingConfig(model_type="basic", epochs=1),
                           data_dir=data_dir, export_dir=f"{claim}/models/{name}/1",
                           work_dir=f"{claim}/models/{name}")


def _job(cluster, operator: str, namespace: str, name: str) -> dict | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return cluster.api_client.call_api(
            PATHS[operator].format(namespace=namespace) + f"/{name}", "GET",
            response_type="object", auth_settings=["BearerToken"],
            _return_http_data_only=True)
    except ApiException as error:
        assert error.status == 404
        return None


def _created_as_the_seed_says(log: str, fault) -> None:
    if fault == "lost":  # the create went through; its retry was told so and re-attached
        assert "re-attaching to the existing" in log, log
    elif fault is not None:  # answered instead of forwarding: retried
        assert "failed transiently" in log and "re-attaching" not in log, log


@pytest.mark.slow  # trains real models
@pytest.mark.parametrize(("step", "operator"), [(s, o[0]) for s, o in SEEDS.items()],
                         indirect=["step"], ids=[f"{o[0]}-seed{s}" for s, o in SEEDS.items()])
def test_the_train_steps_jobs_get_through_the_faults(cluster, step, operator):
    from fmnist_kfp.errors import TrainingJobError

    namespace, claim, proxy, token = step
    seed = proxy.seed
    failing, out = f"fmnist-bad-{seed}", io.StringIO()
    with pytest.raises(TrainingJobError, match=f"{failing} failed"):
        _launcher(operator, namespace, claim, proxy, token, out).run(
            _spec(failing, claim, f"{claim}/no-dataset-here"))
    log = out.getvalue()
    assert f"deleting the failed {'TFJob' if operator == 'tfjob' else 'TrainJob'}" in log, log
    _created_as_the_seed_says(log, SEEDS[seed][1])
    until(lambda: _job(cluster, operator, namespace, failing) is None, "the failed job deleted")

    good, out = f"fmnist-ok-{seed}", io.StringIO()
    outcome = _launcher(operator, namespace, claim, proxy, token, out).run(
        _spec(good, claim, f"{claim}/dataset"))
    log = out.getvalue()
    assert outcome.result["model_type"] == "basic", log
    assert (claim / "models" / good / "1" / "saved_model.pb").exists()
    assert _job(cluster, operator, namespace, good) is not None  # a finished job is kept
    _created_as_the_seed_says(log, SEEDS[seed][2])
    assert proxy.injected, "no fault was given"
    # Every call the launcher made went through the proxy, as the step's ServiceAccount.
    assert not [r for r in proxy.requests if r[2] in (401, 403)], proxy.requests


def test_a_cleanup_whose_answer_was_lost_is_not_reported_as_failed(real_cluster):
    """Found on seed 2: the failed TFJob's DELETE was applied and its answer lost; urllib3's
    default Retry repeated the DELETE (an idempotent method) unseen by the runner, and the
    runner, seeing a 404 on what it took for its first try, said it could not clean up the job
    it had just deleted. A 404 now says the job is gone, on any try."""
    from kubernetes.client.exceptions import ApiException

    from fmnist_kfp.kubernetes.runner import JobFailed, JobStatus, RemoteJob, RemoteJobRunner

    namespace, name = "faults-cleanup", "a-job"
    real_cluster.ensure_namespace(namespace)
    direct = _core(real_cluster.api_client)
    direct.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    proxy = FaultProxy(real_cluster.kubeconfig, 1, rate=1.0, kinds=("lost",),
                       only=lambda method, _: method == "DELETE").start()
    lines: list[str] = []
    try:
        through = _core(proxy.api_client())
        job = RemoteJob(kind="ConfigMap", namespace=namespace, name=name,
                        read=lambda: direct.read_namespaced_config_map(name, namespace),
                        status=lambda _: JobStatus(done=True, failed=True, reason="broken"),
                        cleanup=lambda _: through.delete_namespaced_config_map(name, namespace))
        with pytest.raises(JobFailed):
            RemoteJobRunner(poll_seconds=0.1, log=lines.append).run(job)
    finally:
        proxy.stop()
    with pytest.raises(ApiException) as gone:
        direct.read_namespaced_config_map(name, namespace)
    assert gone.value.status == 404  # the cleanup deleted it
    assert [(i.method, i.kind) for i in proxy.injected] == [("DELETE", "lost")]
    assert ("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{name}", 404) in \
        proxy.requests  # urllib3's own repeat
    assert not [line for line in lines if "could not clean up" in line], lines
    assert f"ConfigMap {namespace}/{name} is already gone" in lines, lines


def test_the_seeds_fault_the_creates(tmp_path):
    """What :data:`SEEDS` says of each seed's creates and delete: decided by the seed alone
    (a faulted create is retried once, never faulted twice in a row)."""
    kubeconfig = unreachable_kubeconfig(tmp_path)
    for seed, (operator, *expected) in SEEDS.items():
        proxy = FaultProxy(kubeconfig, seed, rate=RATE)
        path = PATHS[operator].format(namespace=_namespace(seed))
        given = []
        for _ in range(2):  # the failing job's create (and its retry), the good one's
            given.append(proxy.decide("POST", path)[1])
            if given[-1] is not None:
                assert proxy.decide("POST", path)[1] is None
        given.append(proxy.decide("DELETE", f"{path}/fmnist-bad-{seed}")[1])
        assert given == expected, seed
