"""manifests/scheduling, the example of what ``kubernetes.scheduling`` needs on a cluster
(docs/scheduling.md): each Kueue object valid, strictly, against Kueue's own CRD
(tests/crds/kueue.x-k8s.io_*.yaml, kubernetes-sigs/kueue v0.19.2), the PriorityClasses against
``scheduling.k8s.io/v1`` (the kubernetes client's model), the kustomization listing every file,
and the objects tied to the code that names them: the LocalQueue and WorkloadPriorityClasses
are what a run's job labels name, and the ClusterQueue covers, and admits, what its pods
request."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.tfjob import build_tfjob
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.scheduling import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from fmnist_kfp.training.recipe import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import FIXTURE_CRDS, validate_strict
from tests.manifests.test_setup_manifests import _deserialize, strict_model
from tests.setup_manifests import ROOT, build, kustomization

BASE = "scheduling"
# Kind -> its CRD in tests/crds (tests/crds/SOURCE.md: verbatim at kueue v0.19.2).
KUEUE_CRDS = {
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}
# kubernetes pkg/apis/scheduling/types.go: HighestUserDefinablePriority = 1000000000 (higher
# values are the system classes'); PreemptionPolicy is Never or PreemptLowerPriority.
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


def _objects(kind: str | None = None) -> list[dict]:
    objects = build(BASE)
    return [obj for obj in objects if kind is None or obj["kind"] == kind]


def _one(kind: str) -> dict:
    (obj,) = _objects(kind)
    return obj


def test_the_kustomization_lists_every_file_and_sets_no_namespace():
    """Every YAML file of the base is applied; and no ``namespace:``: kustomize's
    NamespaceTransformer would set it on the Kueue kinds, which it does not know are
    cluster-scoped, so the namespace comes from ``kubectl apply -n`` (kubectl sets it on
    namespaced objects only)."""
    spec = kustomization(BASE)
    files = {path.name for path in (ROOT / BASE).glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(spec["resources"]) == sorted(files)
    assert "namespace" not in spec
    kinds = sorted(obj["kind"] for obj in _objects())
    assert kinds == sorted(["ResourceFlavor", "ClusterQueue", "LocalQueue", "PriorityClass",
                            "PriorityClass", "WorkloadPriorityClass", "WorkloadPriorityClass"])
    for obj in _objects():
        assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fmnist-kfp"


@pytest.mark.parametrize("kind", sorted(KUEUE_CRDS))
def test_each_kueue_object_is_valid_against_its_crd(kind):
    """Strictly (unknown fields refused) at the version it is written in, v1beta2 (served and
    stored by Kueue v0.19.2; the CRD's metadata is only ``type: object``, so the metadata is
    checked against ObjectMeta). Its scope is the CRD's: only the LocalQueue is namespaced."""
    crd = yaml.safe_load((FIXTURE_CRDS / KUEUE_CRDS[kind]).read_text())
    for obj in _objects(kind):
        group, _, version = obj["apiVersion"].partition("/")
        assert (group, version) == ("kueue.x-k8s.io", "v1beta2")
        assert crd["spec"]["names"]["kind"] == kind
        validate_strict(obj, KUEUE_CRDS[kind], version)
        strict_model(obj["metadata"], "V1ObjectMeta", f"{kind}.metadata")
        assert (crd["spec"]["scope"] == "Namespaced") == (kind == "LocalQueue")


def test_strict_validation_refuses_a_misspelt_field():
    import jsonschema

    queue = _one("ClusterQueue")
    queue["spec"]["cohort"] = queue["spec"].pop("cohortName")  # v1beta1's name for it
    with pytest.raises(jsonschema.ValidationError, match="cohort"):
        validate_strict(queue, KUEUE_CRDS["ClusterQueue"], "v1beta2")
    queue = _one("ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "12 cpus"
    with pytest.raises(jsonschema.ValidationError):
        validate_strict(queue, KUEUE_CRDS["ClusterQueue"], "v1beta2")


def test_the_priority_classes_fit_scheduling_k8s_io_v1():
    """scheduling.k8s.io/v1 PriorityClass: every field one of the API's (the kubernetes
    client's V1PriorityClass), ``value`` present, at most the highest user-definable
    priority; neither is the cluster's default; both ``preemptionPolicy: Never`` (pods go
    ahead in the scheduling queue but evict nobody: preempting whole jobs is Kueue's, by the
    WorkloadPriorityClasses)."""
    classes = _objects("PriorityClass")
    assert sorted(obj["metadata"]["name"] for obj in classes) == ["fmnist-high", "fmnist-low"]
    for obj in classes:
        assert obj["apiVersion"] == "scheduling.k8s.io/v1"
        strict_model(obj, "V1PriorityClass", "PriorityClass")
        _deserialize(obj, "V1PriorityClass")  # `value` is required
        assert isinstance(obj["value"], int)
        assert obj["value"] <= HIGHEST_USER_DEFINABLE_PRIORITY
        assert obj["preemptionPolicy"] == "Never"
        assert obj.get("globalDefault") is False
    values = {obj["metadata"]["name"]: obj["value"] for obj in classes}
    assert values["fmnist-high"] > 0 > values["fmnist-low"]  # around the default, 0


def test_each_priority_class_has_a_workload_priority_class_of_the_same_name_and_value():
    """With a queue, a job names the WorkloadPriorityClass of its priority_class
    (``kueue.x-k8s.io/priority-class``); a missing one leaves it without a Workload."""
    pods = {obj["metadata"]["name"]: obj["value"] for obj in _objects("PriorityClass")}
    kueue = {obj["metadata"]["name"]: obj["value"] for obj in _objects("WorkloadPriorityClass")}
    assert kueue == pods


def test_the_queues_and_the_flavor_name_each_other():
    flavor, cluster_queue, local_queue = (_one("ResourceFlavor"), _one("ClusterQueue"),
                                          _one("LocalQueue"))
    assert local_queue["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"]
    flavors = {f["name"] for group in cluster_queue["spec"]["resourceGroups"]
               for f in group["flavors"]}
    assert flavors == {flavor["metadata"]["name"]}
    # {} admits every namespace's LocalQueue; left out, none (the CRD's description).
    assert cluster_queue["spec"]["namespaceSelector"] == {}
    # The CRD's rule: reclaimWithinCohort Never with borrowWithinCohort set is refused, and
    # borrowWithinCohort is for classical preemption only (not fair sharing).
    assert "borrowWithinCohort" not in cluster_queue["spec"]["preemption"]


def _quantity(value) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3, "k": 1e3,
             "M": 1e6, "G": 1e9}
    text = str(value)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * factor
    return float(text)


def _training(name: str, settings: KubernetesSettings, **spec) -> dict:
    return to_manifest(build_tfjob(TrainingJobSpec(
        name=name, config=TrainingConfig(model_type="basic"), data_dir="/mnt/fmnist/dataset",
        export_dir="/mnt/fmnist/model/1", work_dir="/mnt/fmnist/model", **spec), settings))


def _requests(tfjob: dict) -> dict[str, float]:
    """What Kueue counts for a TFJob: every replica's pod requests times its replicas
    (kueue v0.19.2 pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go lines
    112-132 and 234-236)."""
    total: dict[str, float] = {}
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
                total[name] = total.get(name, 0.0) + _quantity(value) * replica.get("replicas", 1)
    return total


def test_a_runs_jobs_name_these_queues_and_fit_the_cluster_queue_as_its_comment_says():
    """A run with {"queue": "fmnist", "priority_class": "fmnist-low"} labels its TFJobs with
    this LocalQueue and WorkloadPriorityClass; the ClusterQueue covers every resource their
    pods request (else Kueue never admits them: "resource ... unavailable in ClusterQueue",
    kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go line 1071), and its quota
    admits a run's three trainings with two workers at once, but not a fourth job."""
    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="team-a", pvc_name="fmnist-data",
                                  scheduling={"queue": "fmnist", "priority_class": "fmnist-low"})
    tfjob = _training("fmnist-basic", settings, num_workers=2)
    labels = tfjob["metadata"]["labels"]
    assert labels[KUEUE_QUEUE_LABEL] == _one("LocalQueue")["metadata"]["name"]
    assert labels[KUEUE_PRIORITY_LABEL] in {o["metadata"]["name"]
                                            for o in _objects("WorkloadPriorityClass")}
    (group,) = _one("ClusterQueue")["spec"]["resourceGroups"]
    requests = _requests(tfjob)
    assert set(requests) <= set(group["coveredResources"]), requests
    (flavor,) = group["flavors"]
    quota = {r["name"]: _quantity(r["nominalQuota"]) for r in flavor["resources"]}
    for resource, needed in requests.items():
        assert 3 * needed <= quota[resource], resource
    assert any(4 * needed > quota[resource] for resource, needed in requests.items())


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_builds_what_the_tests_load(tmp_path):
    directory = tmp_path / BASE
    shutil.copytree(ROOT / BASE, directory)
    built = subprocess.run(["kubectl", "kustomize", str(directory)], check=True,
                           capture_output=True, text=True, timeout=60).stdout
    key = lambda obj: (obj["kind"], obj["metadata"]["name"])  # noqa: E731
    theirs = sorted((doc for doc in yaml.safe_load_all(built) if doc), key=key)
    assert theirs == sorted(build(BASE), key=key)
