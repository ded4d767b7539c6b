"""The setup manifests users apply once (``kubectl apply -k manifests/<base>``): valid against
the Kubernetes API's own schemas (the ``kubernetes`` client's OpenAPI models, strictly: no field
the model lacks, every required one), the Istio policy against the shape of Istio's CRD, and
each tied to the code that relies on it: the Role grants every permission the preflight asks
for, the serving credentials pass the deploy step's own check, the policy lets a pipeline pod
reach our predictors and nothing else."""

from __future__ import annotations

import json
import shutil
import subprocess

import jsonschema
import pytest
import yaml

from fmnist_kfp.kubernetes.inference_service import build_inference_service
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.preflight import PERMISSIONS
from fmnist_kfp.serving.deploy.credentials import credential_problems
from fmnist_kfp.serving.deploy.kserve_api import KServeApi
from fmnist_kfp.settings.serving import KFP_STORE_SERVICE_ACCOUNT, KServeSettings
from tests.setup_manifests import BASES, ROOT, build, kustomization
from tests.standins.kserve import KServeStandIn

MODELS = {"PersistentVolumeClaim": "V1PersistentVolumeClaim", "Role": "V1Role",
          "RoleBinding": "V1RoleBinding", "ServiceAccount": "V1ServiceAccount",
          "Secret": "V1Secret", "Job": "V1Job", "NetworkPolicy": "V1NetworkPolicy"}

# The shape of spec in Istio's AuthorizationPolicy CRD, v1beta1 (kubeflow/manifests v1.11.0
# common/istio/istio-crds/base/crd.yaml, CustomResourceDefinition
# authorizationpolicies.security.istio.io, L1-789; version v1beta1 from L421: action enum L436,
# rules L455, to.operation.methods L554 and paths L579, selector.matchLabels L616), the part our
# policy uses, with unknown fields refused as the API server's strict validation does.
_STRINGS = {"type": "array", "items": {"type": "string"}}
ISTIO_POLICY_SPEC = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "action": {"enum": ["ALLOW", "DENY", "AUDIT", "CUSTOM"], "type": "string"},
        "selector": {"type": "object", "additionalProperties": False, "properties": {
            "matchLabels": {"type": "object", "maxProperties": 4096,
                            "additionalProperties": {"type": "string", "maxLength": 63,
                                                     "not": {"pattern": r"\*"}}}}},
        "rules": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "properties": {
                "from": {"type": "array", "maxItems": 512},
                "to": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "properties": {
                        "operation": {"type": "object", "additionalProperties": False,
                                      "properties": {"hosts": _STRINGS, "methods": _STRINGS,
                                                     "paths": _STRINGS, "ports": _STRINGS,
                                                     "notHosts": _STRINGS,
                                                     "notMethods": _STRINGS,
                                                     "notPaths": _STRINGS,
                                                     "notPorts": _STRINGS}}}}},
                "when": {"type": "array"}}}},
    },
}


def strict_model(data, type_name: str, path: str = "") -> None:
    """``data`` fits the kubernetes client's model ``type_name``: every key is a field of it
    (recursively), then the client's own deserializer checks the required ones."""
    import re

    from kubernetes import client

    if type_name.startswith("list["):
        assert isinstance(data, list), f"{path}: expected a list"
        for index, item in enumerate(data):
            strict_model(item, type_name[5:-1], f"{path}[{index}]")
        return
    if type_name.startswith("dict("):
        inner = re.match(r"dict\(str, (.+)\)", type_name)[1]
        assert isinstance(data, dict), f"{path}: expected a map"
        for key, item in data.items():
            strict_model(item, inner, f"{path}.{key}")
        return
    model = getattr(client, type_name, None)
    if model is None:
        return  # str, int, bool, object
    assert isinstance(data, dict), f"{path}: expected an object for {type_name}"
    fields = {json: attr for attr, json in model.attribute_map.items()}
    for key, value in data.items():
        assert key in fields, f"{path}: {type_name} has no field {key!r}"
        strict_model(value, model.openapi_types[fields[key]], f"{path}.{key}")


def _deserialize(data: dict, type_name: str):
    from kubernetes import client

    class Response:
        def __init__(self, text):
            self.data = text

    return client.ApiClient().deserialize(Response(json.dumps(data)), type_name)


@pytest.mark.parametrize("base", BASES)
def test_every_object_fits_the_kubernetes_api(base):
    objects = build(base, namespace="team-a")
    assert objects
    for obj in objects:
        if obj["kind"] == "AuthorizationPolicy":
            assert obj["apiVersion"] == "security.istio.io/v1beta1"
            assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
            strict_model(obj["metadata"], "V1ObjectMeta", "metadata")
            jsonschema.validate(obj["spec"], ISTIO_POLICY_SPEC)
            continue
        strict_model(obj, MODELS[obj["kind"]], obj["kind"])
        _deserialize(obj, MODELS[obj["kind"]])  # required fields (client-side validation)
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fmnist-kfp"


def test_strict_validation_can_fail():
    with pytest.raises(AssertionError, match="has no field 'acessModes'"):
        strict_model({"spec": {"acessModes": ["ReadWriteMany"]}}, "V1PersistentVolumeClaim")
    with pytest.raises(ValueError, match="`role_ref`"):
        _deserialize({"metadata": {"name": "x"}, "subjects": []}, "V1RoleBinding")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"action": "allow"}, ISTIO_POLICY_SPEC)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"rules": [{"to": [{"operation": {"path": ["/v1/*"]}}]}]},
                            ISTIO_POLICY_SPEC)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("base", BASES)
def test_kubectl_kustomize_builds_what_the_tests_load(base, tmp_path):
    """Each base builds with kubectl's own kustomize, to the objects the tests load."""
    directory = tmp_path / base
    shutil.copytree(ROOT / base, directory)
    env = {}
    for generator in kustomization(base).get("secretGenerator") or []:
        for name in generator["envs"]:
            env = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
            (directory / name).write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    built = subprocess.run(["kubectl", "kustomize", str(directory)], check=True,
                           capture_output=True, text=True, timeout=60).stdout
    key = lambda obj: (obj["kind"], obj["metadata"]["name"])  # noqa: E731
    ours = sorted(build(base, env=env or None), key=key)
    theirs = sorted((doc for doc in yaml.safe_load_all(built) if doc), key=key)
    assert theirs == ours


def test_the_pvc_is_read_write_many_and_named_as_the_compile_default():
    claim, _ = sorted(build("pvc"), key=lambda obj: obj["kind"] != "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "fmnist-data"  # Platform.pvc_name's default
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def _permissions_job() -> dict:
    (job,) = [obj for obj in build("pvc", namespace="team-a") if obj["kind"] == "Job"]
    return job


def test_the_permissions_job_mounts_the_claim_as_the_pipelines_pods_do(real_cluster):
    """The claim's root must be writable before the first run: a step writes it first (the
    dataset copy), and KFP gives step pods no fsGroup (kubeflow/pipelines 2.15.0
    backend/src/v2/compiler/argocompiler/argo.go 153-156: runAsUser only; 2.16.0 argo.go
    163-176 and kubernetes_platform/proto/kubernetes_executor_config.proto 277-291: no
    fsGroup). The Job mounts the claim at the steps' path as the image's user 1000 in group 0
    with fsGroup 0, which the kubelet applies to the root where the driver supports it; no
    Istio sidecar (it would keep the pod running, kubeflow/manifests v1.11.0
    tests/training_operator_job.yaml 12-15); the image is the runtime's base."""
    import copy
    import re
    import uuid

    from fmnist_kfp.settings.platform import IMAGE_GID, IMAGE_UID, MOUNT_PATH

    job = _permissions_job()
    # The API server accepts it, in a namespace of this test's own (the shared cluster's
    # team-a comes and goes with other tests).
    namespace = f"perm-{uuid.uuid4().hex[:6]}"
    real_cluster.ensure_namespace(namespace)
    placed = copy.deepcopy(job)
    placed["metadata"]["namespace"] = namespace
    real_cluster.create(placed, namespace=namespace, dry_run=True)
    real_cluster.delete_namespace(namespace)
    assert job["spec"]["backoffLimit"] == 0  # one answer, not retries of the same one
    template = job["spec"]["template"]
    assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    pod = template["spec"]
    assert pod["securityContext"] == {"runAsUser": IMAGE_UID, "runAsGroup": IMAGE_GID,
                                      "fsGroup": IMAGE_GID,
                                      "fsGroupChangePolicy": "OnRootMismatch"}
    (claim,) = [obj for obj in build("pvc") if obj["kind"] == "PersistentVolumeClaim"]
    assert pod["volumes"] == [{"name": "fmnist-data", "persistentVolumeClaim": {
        "claimName": claim["metadata"]["name"]}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "fmnist-data", "mountPath": MOUNT_PATH}]
    assert container["env"] == [{"name": "ROOT", "value": MOUNT_PATH}]
    dockerfile = (ROOT.parent / "Dockerfile").read_text()
    assert container["image"] == re.search(r"^ARG PYTHON_IMAGE=(\S+)", dockerfile, re.M)[1]


def _run_check(root: str) -> subprocess.CompletedProcess:
    command = _permissions_job()["spec"]["template"]["spec"]["containers"][0]["command"]
    return subprocess.run(command, env={"ROOT": root, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)


def test_the_permissions_check_passes_on_a_writable_root_and_leaves_nothing(tmp_path):
    done = _run_check(str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "the shared volume is ready" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_the_permissions_check_fails_on_a_root_it_cannot_write_naming_the_fix(tmp_path):
    """A root no directory can be made in (a file stands for it: this test may run as root,
    whom permissions do not stop)."""
    root = tmp_path / "not-a-directory"
    root.write_text("")
    done = _run_check(str(root))
    assert done.returncode == 1
    assert "the shared volume is not ready" in done.stderr
    assert "chown 1000:0 <root> && chmod 2775 <root>" in done.stderr
    assert "fsGroupPolicy: File" in done.stderr


def test_the_standalone_role_grants_every_permission_the_pipeline_uses():
    role, binding = sorted(build("standalone-rbac"), key=lambda obj: obj["kind"])
    assert (role["kind"], binding["kind"]) == ("Role", "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kubeflow"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline-runner",
                                    "namespace": "kubeflow"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    for verb, group, resource, subresource, _ in PERMISSIONS:
        name = f"{resource}/{subresource}" if subresource else resource
        assert any(group in rule["apiGroups"] and name in rule["resources"]
                   and verb in rule["verbs"] for rule in role["rules"]), (verb, group, name)


def test_the_serving_credentials_pass_the_deploy_steps_check():
    """What manifests/serving-credentials creates is what the deploy step accepts."""
    with KServeStandIn() as standin:
        for obj in build("serving-credentials", namespace="team-a"):
            standin.put(obj)
        api = KServeApi(standin.api_client("team-a"), "team-a")
        assert credential_problems(api, KFP_STORE_SERVICE_ACCOUNT, print) == []
        (account,) = [o for o in build("serving-credentials") if o["kind"] == "ServiceAccount"]
        assert account["metadata"]["name"] == KFP_STORE_SERVICE_ACCOUNT


# KFP's object store as each supported Kubeflow release installs it: Service → {port:
# targetPort}, and the pod ports SeaweedFS's NetworkPolicy opens to profile namespaces (where
# the predictor's storage initializer runs). kubeflow/manifests, under
# applications/pipeline/upstream/third-party/seaweedfs/base/seaweedfs/:
# - v1.11.0 (KFP 2.15.0): seaweedfs-service.yaml (name L8, port 8333 → 8333 L17-19),
#   minio-service.yaml (name L4, port 9000 → 8333 L10-14), both in kustomization.yaml L5-12;
# - 26.03 (KFP 2.16.0): seaweedfs-service.yaml (name L6, 8333 → 8333 L15-17, 9000 → 8333
#   L19-21); kustomization.yaml L5-11 lists no minio-service.yaml, and the directory has none;
# - both: seaweedfs-networkpolicy.yaml L6-15 (from namespaces labelled
#   app.kubernetes.io/part-of: kubeflow-profile, port 8333 only).
# Only the S3 Services are listed (seaweedfs also serves 8111, 8888, 9333, 18888, 19333).
KFP_OBJECT_STORES = {
    "Kubeflow 1.11.0": {"services": {"seaweedfs.kubeflow": {8333: 8333},
                                     "minio-service.kubeflow": {9000: 8333}},
                        "profile_ports": {8333}},
    # KFP's SeaweedFS manifests are unchanged from 26.03 (kubeflow/manifests master 009c88084).
    "Kubeflow 26.03.1": {"services": {"seaweedfs.kubeflow": {8333: 8333, 9000: 8333}},
                         "profile_ports": {8333}},
    "Kubeflow 26.03": {"services": {"seaweedfs.kubeflow": {8333: 8333, 9000: 8333}},
                       "profile_ports": {8333}},
}


@pytest.mark.parametrize("release", sorted(KFP_OBJECT_STORES))
def test_the_serving_credentials_name_an_endpoint_every_supported_release_serves(release):
    """KServe's storage initializer fetches the model from the s3-endpoint annotation of our
    Secret: a Service and port of KFP's object store that the release installs and whose pod
    port its NetworkPolicy admits from a profile namespace. minio-service.kubeflow:9000 was
    one on 1.11 (an alias of SeaweedFS) but is gone from 26.03."""
    from fmnist_kfp.serving.deploy import credentials

    (secret,) = [o for o in build("serving-credentials") if o["kind"] == "Secret"]
    endpoint = secret["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"]
    host, _, port = endpoint.rpartition(":")
    store = KFP_OBJECT_STORES[release]
    assert host in store["services"], f"{release} has no Service {host}"
    assert int(port) in store["services"][host], f"{release}: {host} has no port {port}"
    assert store["services"][host][int(port)] in store["profile_ports"]
    # The deploy step's advice names the same endpoint.
    assert endpoint == getattr(credentials, "KFP_STORE_ENDPOINT", None)


def test_every_kubeflow_release_the_docs_support_has_its_object_store_checked():
    """A row of the support matrix (docs/cluster.md, "What it runs on") that runs the whole
    pipeline on a Kubeflow release has that release's object store in KFP_OBJECT_STORES, so the
    serving credentials' endpoint is checked against it (a new release's row needs its Services
    read first)."""
    page = (ROOT.parent / "docs" / "cluster.md").read_text()
    section = page.split("\n## What it runs on\n", 1)[1].split("\n## ", 1)[0]
    supported = []
    for line in section.splitlines():
        if not line.startswith("| Kubeflow "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if cells[0][9:10].isdigit() and cells[2].startswith("the whole pipeline"):
            supported.append(cells[0])
    assert supported == ["Kubeflow 26.03.1", "Kubeflow 26.03", "Kubeflow 1.11.0"]
    assert set(supported) == set(KFP_OBJECT_STORES)


def test_the_istio_policy_selects_our_predictors_and_only_the_inference_paths():
    (policy,) = build("serving-access", namespace="team-a")
    manifest = to_manifest(build_inference_service(
        KServeSettings(namespace="team-a", image="x/y:1"), storage_uri="pvc://a/b"))
    # KServe puts the InferenceService's labels and component=predictor on its pods
    # (components/predictor.go v0.15.2 L444-458).
    pod_labels = {**manifest["metadata"]["labels"], "component": "predictor"}
    wanted = policy["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= pod_labels.items()
    assert set(wanted) != {"app.kubernetes.io/part-of"}  # not every pod of ours
    (rule,) = policy["spec"]["rules"]
    assert "from" not in rule  # pipeline pods have no sidecar, so no peer identity to match
    (target,) = rule["to"]
    assert sorted(target["operation"]["paths"]) == ["/v1/models/*", "/v2/models/*"]


def test_the_kueue_viewer_role_is_named_as_kueues_manifests_install_it():
    """Kueue's release manifests prefix every name with ``kueue-`` (kueue v0.19.2
    ``config/default/kustomization.yaml`` line 9): a binding to ``workload-viewer-role``
    grants nothing. The docs and the role name the installed ``kueue-workload-viewer-role``
    (the role's comment may cite the unprefixed source name)."""
    import re

    pages = [*sorted((ROOT.parent / "docs").glob("*.md")),
             ROOT / "standalone-rbac" / "role.yaml"]
    bare = [f"{page.name}: {line.strip()}" for page in pages
            for line in page.read_text().splitlines()
            if re.search(r"(?<![\w-])workload-viewer-role", line) and "names it" not in line]
    assert not bare, bare
