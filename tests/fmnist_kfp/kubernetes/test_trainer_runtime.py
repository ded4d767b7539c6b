"""The Kubeflow Trainer v2 runtime ``fmnist-tensorflow`` (manifests/trainer-runtime): strictly
valid against the upstream ClusterTrainingRuntime CRD (../shared/crds/trainer-v2, Trainer
v2.1.0, whose template embeds JobSet v0.10.1's spec), and shaped as Trainer, JobSet and
Kubernetes need it for the TF_CONFIG our trainer builds
(fmnist_kfp/training/jobset_cluster.py). Each rule cites its upstream code; tests/UPSTREAM.md
lists them."""

from __future__ import annotations

import shutil
import subprocess

import jsonschema
import pytest
import yaml

from fmnist_kfp.settings.platform import IMAGE_GID, IMAGE_UID, RELEASE_IMAGE
from fmnist_kfp.training import jobset_cluster
from tests.crd_schemas import validate_strict
from tests.setup_manifests import ROOT, build

CRD = "trainer-v2/clustertrainingruntime.trainer.kubeflow.org_v1alpha1.yaml"
BASE = "trainer-runtime"
# kubeflow/trainer v2.1.0 (and v2.2.0) pkg/constants/constants.go: LabelTrainJobAncestor
# (v2.1.0 line 25), AncestorTrainer (line 50), Node (line 53).
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


def runtime() -> dict:
    (only,) = build(BASE)
    return only


def node_job(manifest: dict) -> dict:
    (job,) = manifest["spec"]["template"]["spec"]["replicatedJobs"]
    return job


def node_container(manifest: dict) -> dict:
    (container,) = node_job(manifest)["template"]["spec"]["template"]["spec"]["containers"]
    return container


def test_the_runtime_passes_strict_crd_validation():
    manifest = runtime()
    validate_strict(manifest, CRD, "v1alpha1")
    assert manifest["kind"] == "ClusterTrainingRuntime"
    assert manifest["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert manifest["metadata"]["name"] == "fmnist-tensorflow"  # what our TrainJobs reference
    assert "namespace" not in manifest["metadata"]  # cluster-scoped
    assert manifest["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "tensorflow"


def test_strict_validation_catches_a_misspelt_field():
    manifest = runtime()
    manifest["spec"]["template"]["spec"]["network"]["enableDnsHostnames"] = True
    with pytest.raises(jsonschema.ValidationError, match="enableDnsHostnames"):
        validate_strict(manifest, CRD, "v1alpha1")


def test_plainml_applies_no_framework_policy_and_numnodes_defaults_to_one():
    # plugins/plainml/plainml.go v2.1.0 lines 46-49 (v2.2.0: jax added): any torch or mpi
    # policy turns PlainML off, and with it the numNodes and env of the TrainJob.
    assert runtime()["spec"]["mlPolicy"] == {"numNodes": 1}


def test_one_replicated_job_node_labelled_as_the_trainer_with_one_replica():
    job = node_job(runtime())
    assert job["name"] == jobset_cluster.REPLICATED_JOB_NAME == "node"
    # PlainML finds the pod set by this label (plainml.go v2.1.0 line 53), the JobSet builder
    # sets image, command, env on it (plugins/jobset/builder.go v2.1.0 lines 113-170).
    assert job["template"]["metadata"]["labels"][ANCESTOR_LABEL] == "trainer"
    # Trainer's runtime webhook: replicas of an ancestor job "always must be 1"
    # (pkg/webhooks/trainingruntime_webhook.go v2.1.0 lines 85-87).
    assert job["replicas"] == 1


def test_the_trainer_container_is_named_node_and_runs_the_release_image():
    container = node_container(runtime())
    # The webhook wants a container `node` in the trainer job (trainingruntime_webhook.go
    # v2.1.0 lines 43-47, 94-106); PlainML and the builder find it by that name
    # (plainml.go line 61, builder.go line 126).
    assert container["name"] == "node"
    # TrainJob.spec.trainer.image replaces it (builder.go v2.1.0 lines 128-131); this is the
    # image a TrainJob naming none runs, held to this version's release image.
    assert container["image"] == RELEASE_IMAGE


def test_the_job_is_indexed_and_every_failure_goes_to_the_jobset():
    spec = node_job(runtime())["template"]["spec"]
    # JOB_COMPLETION_INDEX and the pod hostnames need an Indexed Job (JobSet's webhook
    # defaults it too: jobset v0.10.1 pkg/webhooks/jobset_webhook.go lines 120-123).
    assert spec["completionMode"] == "Indexed"
    # Trainer sets both to numNodes (plugins/jobset/jobset.go v2.1.0 lines 261-265): left out.
    assert "parallelism" not in spec and "completions" not in spec
    assert spec["backoffLimit"] == 0
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_exit_codes_1_to_127_fail_the_jobset_as_the_exitcode_policy_fails_a_tfjob():
    manifest = runtime()
    spec = node_job(manifest)["template"]["spec"]
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob"
    on_exit = rule["onExitCodes"]
    # kubernetes pkg/apis/batch/validation/validation.go validatePodFailurePolicyRuleOnExitCodes:
    # a container of the pod, at most 255 values, ordered, unique, no 0 with In; and
    # podFailurePolicy only with restartPolicy Never (validateJobSpec).
    assert on_exit["containerName"] == node_container(manifest)["name"]
    assert on_exit["operator"] == "In"
    assert on_exit["values"] == list(range(1, 128))
    # A Job failed by its podFailurePolicy has reason PodFailurePolicy; the JobSet's rule
    # fails the JobSet on it; any other failure (exit >= 128, an evicted pod) restarts it
    # (jobset v0.10.1 pkg/controllers/failure_policy.go lines 41-78).
    policy = manifest["spec"]["template"]["spec"]["failurePolicy"]
    assert policy["rules"] == [{"name": "FailOnPermanentError", "action": "FailJobSet",
                                "onJobFailureReasons": ["PodFailurePolicy"]}]
    assert policy["maxRestarts"] >= 2  # the default max_restarts fits under the ceiling


def test_pods_get_dns_names_under_the_jobsets_subdomain():
    network = runtime()["spec"]["template"]["spec"]["network"]
    assert network == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    # No subdomain: it defaults to the JobSet's name (jobset_controller.go v0.10.1 lines
    # 835-844), which tf_config_from_jobset assumes.


def test_the_env_gives_tf_config_from_jobset_what_it_reads():
    container = node_container(runtime())
    env = {e["name"]: e for e in container["env"]}
    # The JobSet's pod labels (jobset v0.10.1 api/jobset/v1alpha2/jobset_types.go lines 23-35,
    # set on pods by jobset_controller.go labelAndAnnotateObject, lines 765-797).
    labels = {
        jobset_cluster.JOBSET_NAME: "jobset.sigs.k8s.io/jobset-name",
        jobset_cluster.REPLICATED_JOB: "jobset.sigs.k8s.io/replicatedjob-name",
        jobset_cluster.JOB_INDEX: "jobset.sigs.k8s.io/job-index",
    }
    for name, label in labels.items():
        assert env[name]["valueFrom"] == {
            "fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}
    # Kubernetes sets JOB_COMPLETION_INDEX in every pod of an Indexed Job; the TrainJob's
    # trainer.env gives FMNIST_NUM_NODES (PlainML upserts it, plainml.go lines 59-64).
    assert jobset_cluster.COMPLETION_INDEX not in env
    assert jobset_cluster.NUM_NODES not in env
    assert jobset_cluster.LOOPBACK_PORTS not in env  # local runs only
    runtime_vars = set(jobset_cluster.RUNTIME_VARIABLES) - {jobset_cluster.NUM_NODES}
    assert runtime_vars <= set(env)


def test_the_port_the_env_names_is_the_containers_port():
    container = node_container(runtime())
    env = {e["name"]: e.get("value") for e in container["env"]}
    (port,) = container["ports"]
    assert int(env[jobset_cluster.TF_PORT]) == port["containerPort"] \
        == jobset_cluster.DEFAULT_TF_PORT
    assert port["protocol"] == "TCP"


def test_a_pod_of_the_runtime_builds_the_tf_config_of_its_node():
    """The runtime's env, resolved as the JobSet would label node 1 of TrainJob "mnist" with
    2 nodes, plus what Kubernetes and the TrainJob add: worker 1 of the two DNS names."""
    container = node_container(runtime())
    labels = {"jobset.sigs.k8s.io/jobset-name": "mnist",
              "jobset.sigs.k8s.io/replicatedjob-name": node_job(runtime())["name"],
              "jobset.sigs.k8s.io/job-index": "0"}
    env = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = labels[path.removeprefix("metadata.labels['").removesuffix("']")]
    env.update(JOB_COMPLETION_INDEX="1", FMNIST_NUM_NODES="2")
    config = jobset_cluster.tf_config_from_jobset(env)
    assert config["cluster"] == {"worker": ["mnist-node-0-0.mnist:2222",
                                            "mnist-node-0-1.mnist:2222"]}
    assert config["task"] == {"type": "worker", "index": 1}


def test_no_istio_sidecar_and_the_images_user():
    template = node_job(runtime())["template"]["spec"]["template"]
    # As our TFJob pods (fmnist_kfp/kubernetes/tfjob.py): label and annotation.
    assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    context = template["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (IMAGE_UID, IMAGE_GID)
    assert context["fsGroup"] == IMAGE_GID


def test_the_kustomization_lists_the_runtime_only():
    kustomization = yaml.safe_load((ROOT / BASE / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["cluster-training-runtime.yaml"]
    assert "namespace" not in kustomization  # a cluster-scoped object


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_builds_what_the_tests_load(tmp_path):
    built = subprocess.run(["kubectl", "kustomize", str(ROOT / BASE)], check=True,
                           capture_output=True, text=True, timeout=60).stdout
    assert [doc for doc in yaml.safe_load_all(built) if doc] == [runtime()]
