"""The real control plane under the tests (localcluster/): upstream kube-apiserver, etcd,
kube-controller-manager and kube-scheduler, built from their Go modules and started once per
test session, with the upstream CRDs the package's objects need installed as a user installs
them.

The ``real_cluster`` fixture (tests/conftest.py) hands tests a :class:`RealCluster`: the admin's
kubeconfig, a Python client on it, and helpers to create what a test needs. Its tests run in
one work unit (``SHARED_FIXTURES``), so the cluster starts once per ``make test``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.crd_schemas import crds_dir

HERE = Path(__file__).resolve().parent
# The upstream CRDs of every kind the package creates or reads (their sources:
# ../shared/crds/SOURCE.md and tests/crds/SOURCE.md).
SHARED_CRDS = (
    "tfjob.kubeflow.org_v1.yaml",
    "experiment.kubeflow.org_v1beta1.yaml",
    "trial.kubeflow.org_v1beta1.yaml",
    "suggestion.kubeflow.org_v1beta1.yaml",
    "inferenceservice.serving.kserve.io_v1beta1.yaml",
    "servingruntime.serving.kserve.io_v1alpha1.yaml",
    "clusterservingruntime.serving.kserve.io_v1alpha1.yaml",
    "trainer-v2/clustertrainingruntime.trainer.kubeflow.org_v1alpha1.yaml",
    "trainer-v2/trainingruntime.trainer.kubeflow.org_v1alpha1.yaml",
    "trainer-v2/trainjob.trainer.kubeflow.org_v1alpha1.yaml",
    "trainer-v2/jobset.jobset.x-k8s.io_v1alpha2.yaml",
)
TEST_CRDS = (
    "tensorboard.kubeflow.org_tensorboards.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_localqueues.yaml",
    "kueue.x-k8s.io_resourceflavors.yaml",
    "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "kueue.x-k8s.io_workloads.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
    "scheduling.x-k8s.io_podgroups.yaml",
)
CRD_ESTABLISHED_SECONDS = 60
# The RBAC authorizer reads Roles and bindings from informers: a Role just written grants its
# rules a moment later.
GRANT_SECONDS = 30
# The upstream operators whose images the node runs (installed by the tests that need them).
OPERATORS = ("TRAINING_OPERATOR_V1", "JOBSET_V0_10", "TRAINER_V2_1")
# Kubeflow 26.03.1's Trainer and JobSet, on a cluster of their own (real_cluster_trainer_2_2),
# whose node also runs Kueue (which queues TrainJobs from Trainer 2.2 on), Katib, KServe v0.16.0
# (Kubeflow 26.03's) and, for the TFJobs they queue and tune, the Training Operator; those are
# installed by the tests that use them. (Katib runs here, not on real_cluster, whose tests
# create Experiments for their own purposes that a running katib-controller would act on.) The
# whole pipeline runs on this cluster: tests/pipelines/test_pipeline_on_the_cluster.py.
TRAINER_2_2 = ("JOBSET_V0_11", "TRAINER_V2_2")
TRAINER_2_2_NODE = (*TRAINER_2_2, "TRAINING_OPERATOR_V1", "KUEUE_V0_19", "KATIB_V0_19",
                    "KSERVE_V0_16")
# A training image whose pods do what a test scripts instead of training (tests/scripted_pod.py).
SCRIPTED_IMAGE = "scripted-pod:1"


def can_run_pods() -> bool:
    """The node agent needs root (network namespaces, bind mounts) and iproute2."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which(
        "unshare") is not None


@dataclass
class RealCluster:
    """A running control plane and a client of its admin; ``node_dir``: the node agent's
    state (None without one: not root)."""

    kubeconfig: Path
    api_client: Any  # kubernetes.client.ApiClient
    node_dir: Path | None = None

    def require_node(self) -> None:
        """Skips a test that runs pods where no node agent runs (fails in CI)."""
        if self.node_dir is None:
            message = "pods need the node agent, which needs root and iproute2"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)

    def install(self, operator_name: str) -> None:
        """Installs an operator of localcluster.operators (once: later calls re-apply)."""
        from localcluster import operators

        self.require_node()
        operators.install(self.api_client, getattr(operators, operator_name))

    def claim_dir(self, namespace: str, claim: str) -> Path:
        """Where the node keeps PersistentVolumeClaim ``claim``'s files."""
        assert self.node_dir is not None
        return self.node_dir / "volumes" / namespace / claim

    def create(self, manifest: dict[str, Any], *, namespace: str | None = None,
               dry_run: bool = False) -> dict[str, Any]:
        """POSTs ``manifest`` as the API server receives it, with strict field validation
        (an unknown field is an error, as `kubectl apply` makes it); the stored object."""
        path = self.collection_path(manifest, namespace)
        query = [("fieldValidation", "Strict")] + ([("dryRun", "All")] if dry_run else [])
        return self.api_client.call_api(
            path, "POST", body=manifest, query_params=query, response_type="object",
            auth_settings=["BearerToken"], _return_http_data_only=True)

    def apply(self, manifest: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Creates ``manifest``, or replaces the stored object of its name (``kubectl apply``'s
        outcome for a whole object)."""
        from localcluster import operators

        if namespace:
            manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
        return operators.apply(self.api_client, manifest)

    def collection_path(self, manifest: dict[str, Any], namespace: str | None = None) -> str:
        """The REST path of ``manifest``'s kind, found by discovery as kubectl finds it."""
        from localcluster import operators

        if namespace:
            manifest = {**manifest, "metadata": {**manifest.get("metadata", {}),
                                                 "namespace": namespace}}
        return operators.collection_path(self.api_client, manifest)

    def token_for(self, namespace: str, account: str) -> str:
        """A token of ServiceAccount ``account`` of ``namespace`` (the TokenRequest API), as a
        pod of it gets one."""
        from kubernetes import client

        return client.CoreV1Api(self.api_client).create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token

    def configuration_as(self, namespace: str, account: str):
        """A client ``Configuration`` that authenticates as ServiceAccount ``account`` of
        ``namespace`` (:meth:`token_for`)."""
        from kubernetes import client

        token = self.token_for(namespace, account)
        admin = self.api_client.configuration
        configuration = client.Configuration()
        configuration.host = admin.host
        configuration.ssl_ca_cert = admin.ssl_ca_cert
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return configuration

    def read_or_none(self, path: str) -> dict[str, Any] | None:
        """The object at REST ``path`` as the admin reads it; None where the API server
        answers 404 (any other error is raised)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api_client.call_api(
                path, "GET", response_type="object", auth_settings=["BearerToken"],
                _return_http_data_only=True)
        except ApiException as error:
            if error.status != 404:
                raise
            return None

    def gone(self, path: str, seconds: float = 60) -> bool:
        """Whether the object at REST ``path`` is deleted within ``seconds``."""
        deadline = time.monotonic() + seconds
        while self.read_or_none(path) is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def pod_finished(self, namespace: str, pod: str, seconds: float,
                     every: float = 1.0) -> tuple[str, str]:
        """Waits (at most ``seconds``) for ``pod`` to succeed or fail: (phase, its log)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client)
        deadline = time.monotonic() + seconds
        while (phase := core.read_namespaced_pod(pod, namespace).status.phase) not in (
                "Succeeded", "Failed"):
            assert time.monotonic() < deadline, f"pod {namespace}/{pod} still {phase}"
            time.sleep(every)
        return phase, core.read_namespaced_pod_log(pod, namespace)

    def rolled_out(self, namespace: str, name: str) -> bool:
        """Whether one-replica Deployment ``name`` runs its current template alone: the
        Deployment controller has seen the change, its one pod is updated and available, and
        the old pod is gone (never two controllers reconciling at once)."""
        from kubernetes import client

        apps = client.AppsV1Api(self.api_client)
        deployment = apps.read_namespaced_deployment(name, namespace)
        status = deployment.status
        if (status.observed_generation or 0) < deployment.metadata.generation or \
                status.updated_replicas != 1 or status.available_replicas != 1:
            return False
        selector = ",".join(f"{k}={v}" for k, v in
                            deployment.spec.selector.match_labels.items())
        return len(client.CoreV1Api(self.api_client).list_namespaced_pod(
            namespace, label_selector=selector).items) == 1

    def run_step_pod(self, namespace: str, name: str, image: str, env: dict[str, str],
                     script: str, seconds: float) -> tuple[dict, str]:
        """Runs ``script`` as KFP runs a step: a pod of ``image`` with the environment
        ``env``, as the pipeline-runner ServiceAccount, the claim ``env`` names
        (FMNIST_PVC_NAME) mounted at the platform's mount path. (The artifact paths it is given
        are this machine's: the node runs pods as processes here.) Its last output line is
        JSON: (that, the pod's log)."""
        from kubernetes import client

        client.CoreV1Api(self.api_client).create_namespaced_pod(
            namespace, step_pod(name, image, env, script))
        return self.step_result(namespace, name, seconds)

    def step_result(self, namespace: str, name: str, seconds: float) -> tuple[dict, str]:
        """Waits for step pod ``name`` (:func:`step_pod`) to succeed: (the JSON of its last
        output line, its log)."""
        phase, log = self.pod_finished(namespace, name, seconds)
        assert phase == "Succeeded", log[-6000:]
        return json.loads(log.strip().splitlines()[-1]), log

    def delete_namespace(self, name: str) -> None:
        """Deletes namespace ``name`` and so everything in it (the namespace controller): a
        test's jobs left running would hold the node's CPU that the next tests request."""
        from kubernetes import client

        client.CoreV1Api(self.api_client).delete_namespace(name)

    def ensure_namespace(self, name: str) -> None:
        """Namespace ``name``, created if missing (or once an earlier test's deletion of it has
        finished), once the controller manager has settled it:
        its `default` ServiceAccount and its `kube-root-ca.crt` ConfigMap (rootcacertpublisher,
        kubernetes v1.34.1 pkg/controller/certificates/rootcacertpublisher/publisher.go) exist.
        A test that lists or watches the namespace's ConfigMaps then sees its own only; and
        once admission lets a pod in (:func:`_wait_until_admission_sees`: Kueue's webhook)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(self.api_client)
        deadline = time.monotonic() + 120
        while True:
            try:
                core.create_namespace(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                break
            except ApiException as error:
                if error.status != 409:
                    raise
            # A namespace an earlier test deleted answers 409 while the namespace controller
            # empties it, and refuses new objects (NamespaceTerminating) until it is gone.
            existing = self.read_or_none(f"/api/v1/namespaces/{name}")
            if existing is not None and existing["status"].get("phase") != "Terminating":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name} still terminating after 120 s")
            time.sleep(0.2)
        _wait_for_default_service_account(core, name)
        deadline = time.monotonic() + 60
        while self.read_or_none(f"/api/v1/namespaces/{name}/configmaps/kube-root-ca.crt") is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no kube-root-ca.crt ConfigMap in {name} after 60 s")
            time.sleep(0.1)
        _wait_until_admission_sees(core, name)

    def grant_pipeline_runner(self, namespace: str, role_edit=None) -> None:
        """Namespace ``namespace`` as the README's setup leaves it for standalone KFP: the
        ``pipeline-runner`` ServiceAccount bound to manifests/standalone-rbac's Role (through
        ``role_edit(role)`` where given), once the authorizer grants it."""
        from tests.setup_manifests import build

        self.ensure_namespace(namespace)
        self.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "pipeline-runner", "namespace": namespace}})
        for obj in build("standalone-rbac"):  # for namespace `kubeflow`, standalone KFP's
            obj = copy.deepcopy(obj)
            obj["metadata"]["namespace"] = namespace
            if obj["kind"] == "RoleBinding":
                obj["subjects"][0]["namespace"] = namespace
            if obj["kind"] == "Role" and role_edit:
                obj = role_edit(obj)
            self.apply(obj)
        self.wait_until_granted(namespace, "pipeline-runner")

    def wait_until_granted(self, namespace: str, account: str, verb: str = "list",
                           group: str = "", resource: str = "pods") -> None:
        """Until the authorizer has seen the account's binding (it reads Roles and bindings
        from informers): ``verb`` on ``resource`` of ``group`` is allowed (by default its pods
        list, granted by every role here)."""
        from kubernetes import client

        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": f"system:serviceaccount:{namespace}:{account}",
                           "groups": ["system:serviceaccounts",
                                      f"system:serviceaccounts:{namespace}"],
                           "resourceAttributes": {"namespace": namespace, "verb": verb,
                                                  "group": group, "resource": resource}}}
        api = client.AuthorizationV1Api(self.api_client)
        deadline = time.monotonic() + GRANT_SECONDS
        while not api.create_subject_access_review(review).status.allowed:
            assert time.monotonic() < deadline, f"{account}'s role never took effect"
            time.sleep(0.1)

    def add_claim(self, namespace: str, claim: str = "fmnist-data",
                  dataset: Path | None = None) -> Path:
        """A ReadWriteMany claim of the node's default StorageClass: its directory on the
        node, holding a copy of ``dataset`` at ``dataset/`` where given."""
        from kubernetes import client

        client.CoreV1Api(self.api_client).create_namespaced_persistent_volume_claim(
            namespace, {"metadata": {"name": claim},
                        "spec": {"accessModes": ["ReadWriteMany"],
                                 "resources": {"requests": {"storage": "1Gi"}}}})
        root = self.claim_dir(namespace, claim)
        root.mkdir(parents=True, exist_ok=True)
        if dataset is not None:
            shutil.copytree(dataset, root / "dataset")
        return root

    def apply_training_runtime(self) -> None:
        """Our ClusterTrainingRuntime, applied as a cluster admin applies it
        (``kubectl apply -k manifests/trainer-runtime``)."""
        from tests.setup_manifests import build

        for obj in build("trainer-runtime"):
            self.apply(obj)

    def script_pods(self, namespace: str, scripts: dict, claim: str = "fmnist-data") -> None:
        """What each pod of SCRIPTED_IMAGE does (tests/scripted_pod.py), keyed by hostname:
        written where those pods mount ``claim``."""
        root = self.claim_dir(namespace, claim)
        root.mkdir(parents=True, exist_ok=True)
        (root / "scripts.json").write_text(json.dumps(scripts))

    def step_namespace(self, prefix: str, dataset: Path | None = None,
                       claim: str = "fmnist-data", name: str = "") -> str:
        """A new namespace ``<prefix>-<6 hex>`` (or ``name``: a fault proxy's faults follow
        the paths) where a train step can run: the pipeline-runner ServiceAccount and its Role
        (:meth:`grant_pipeline_runner`) and the claim (:meth:`add_claim`). The test deletes it
        (:meth:`delete_namespace`)."""
        name = name or f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.grant_pipeline_runner(name)
        self.add_claim(name, claim, dataset)
        return name



def step_pod(name: str, image: str, env: dict[str, str], script: str = "", *,
             command: list[str] | None = None,
             claims: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A pipeline step's pod, as KFP makes it (RealCluster.run_step_pod): ``python -c
    script`` (or ``command``), with ``claims`` mounted ((claim, mount path) pairs; by default
    the claim ``env`` names, FMNIST_PVC_NAME, at the platform's mount path)."""
    from fmnist_kfp.settings.platform import MOUNT_PATH

    if claims is None:
        claims = [(env["FMNIST_PVC_NAME"], MOUNT_PATH)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": "pipeline-runner", "restartPolicy": "Never",
                     "containers": [{
                         "name": "main", "image": image,
                         "command": command or ["python", "-c", script],
                         "env": [{"name": k, "value": v} for k, v in env.items()],
                         "volumeMounts": [{"name": f"claim-{i}", "mountPath": path}
                                          for i, (_, path) in enumerate(claims)]}],
                     "volumes": [{"name": f"claim-{i}",
                                  "persistentVolumeClaim": {"claimName": claim}}
                                 for i, (claim, _) in enumerate(claims)]}}


def until(condition, what: str, seconds: float = 60, every: float = 0.2, shown=None):
    """``condition()``'s first true value, asked every ``every`` seconds; fails the test with
    ``what``, and ``shown()`` where given (the state that was last seen), when none comes
    within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not {what} after {seconds:.0f} s" + (
            f": {shown()}" if shown else "")
        time.sleep(every)
    return value

def leave_scripted_result(work_dir: Path) -> None:
    """What a finished job's chief (or node 0) leaves in its work directory, for a job of
    SCRIPTED_IMAGE that trains nothing: ``result.json`` naming the model."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "result.json").write_text(json.dumps({"model_type": "basic"}))

def install_crds(api_client) -> None:
    """Creates the upstream CRDs and waits until the API server serves each."""
    from kubernetes import client

    from localcluster.operators import yaml_documents

    extensions = client.ApiextensionsV1Api(api_client)
    paths = [crds_dir() / name for name in SHARED_CRDS] + [
        HERE / "crds" / name for name in TEST_CRDS]
    names = []
    for path in paths:
        for document in yaml_documents(path.read_text()):
            extensions.create_custom_resource_definition(document)
            names.append(document["metadata"]["name"])
    deadline = time.monotonic() + CRD_ESTABLISHED_SECONDS
    for name in names:
        while True:
            crd = extensions.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in (crd.status.conditions or [])}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established: {conditions}")
            time.sleep(0.1)


def _scripted_program(state_dir: Path) -> Path:
    """tests/scripted_pod.py as an executable of this Python, for the node's ``--program``."""
    program = state_dir / "scripted-pod"
    state_dir.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!{sys.executable}\n" + (HERE / "scripted_pod.py").read_text())
    program.chmod(0o755)
    return program


def start_real_cluster(state_dir: Path, operators_run: tuple[str, ...] = OPERATORS, *,
                       node: bool = True, crds: bool = True):
    """The control plane, started in ``state_dir``, with the CRDs installed: (plane, cluster).
    ``operators_run``: the operators (of localcluster.operators) whose images its node runs;
    ``node``: whether a node agent runs pods (where it can); ``crds``: whether the upstream
    CRDs are installed (:func:`install_crds`)."""
    from kubernetes import client, config

    # `make test` builds the programs before pytest starts (`make cluster-build`), where the
    # first build's minutes show on the terminal; here the build is a cache look-up.
    from localcluster import operators
    from localcluster.control_plane import ControlPlane

    node = node and can_run_pods()
    programs = None
    if node:
        programs = operators.programs([getattr(operators, o) for o in operators_run])
        programs[SCRIPTED_IMAGE.split(":")[0]] = str(_scripted_program(state_dir))
    plane = ControlPlane(state_dir).start(node_agent=node, gpus=2 if node else 0,
                                          programs=programs)
    try:
        api_client = config.new_client_from_config(str(plane.kubeconfig("admin")))
        if crds:
            install_crds(api_client)
        cluster = RealCluster(plane.kubeconfig("admin"), api_client,
                              state_dir / "node" if node else None)
        _wait_for_default_service_account(client.CoreV1Api(api_client))
    except BaseException:
        plane.stop()
        raise
    return plane, cluster


def _wait_until_admission_sees(core, namespace: str) -> None:
    """Until a pod in ``namespace`` passes admission (a dry run, which calls the webhooks but
    persists nothing). Kueue's pod webhook reads the pod's namespace from its manager's
    informer cache and refuses the pod with 404 `Namespace "<name>" not found` until that
    cache has caught up (kubernetes-sigs/kueue v0.19.2
    pkg/controller/jobs/pod/pod_webhook.go lines 113-118): a namespace made a moment ago can
    refuse its first pod while Kueue is installed. Any other refusal is left to the test."""
    from kubernetes.client.exceptions import ApiException

    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "admission-probe"},
             "spec": {"containers": [{"name": "probe", "image": "admission-probe"}]}}

    def admitted() -> bool:
        try:
            core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as error:
            return error.status != 404
        return True

    until(admitted, f"a pod in {namespace} past admission (404 from a webhook)", 60)


def _wait_for_default_service_account(core, namespace: str = "default") -> None:
    """The controller manager's ServiceAccount controller makes `default` in each namespace:
    until it has, the ServiceAccount admission plugin refuses every pod there."""
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(namespace).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {namespace} after 60 s")
        time.sleep(0.2)
