"""The upstream operators, installed on the local cluster as a user installs them: their own
install manifests, read from the Go module of the version we pin and rendered by kustomize
(``kubectl apply -k``), applied through the API; their Deployments' pods then run on the node
agent, each image as the program built from the same module (``--program``), under its own
ServiceAccount and RBAC, its webhooks called by the API server at its Service's endpoints with
the certificates its own cert rotation makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from localcluster import katib_services
from localcluster.build import HERE, build, go_command
from localcluster.programs import (
    JOBSET_0_10,
    JOBSET_0_11,
    KATIB,
    KSERVE_0_15,
    KSERVE_0_16,
    KUEUE,
    KUSTOMIZE,
    TRAINER_2_1,
    TRAINER_2_2,
    TRAINING_OPERATOR,
    GoModule,
)

READY_SECONDS = 120


@dataclass(frozen=True)
class Operator:
    """An operator: the module it is built from, the upstream module and kustomization that
    install it, and the image repository names its pods run."""

    name: str
    module: GoModule
    upstream: str  # module path whose files hold the manifests
    kustomization: str  # folder inside it
    images: dict[str, str]  # image repository name -> program of `module`
    namespace: str
    deployment: str
    # Resources of the kustomization left out, as its own comments say to where that part is
    # installed otherwise (Trainer's manager overlay fetches JobSet's release from GitHub).
    without: tuple[str, ...] = ()
    # Objects of the rendered manifests left out, by name: parts that have no program here.
    without_objects: tuple[str, ...] = ()
    # ... and by kind: kinds of another operator that is not installed (cert-manager's).
    without_kinds: tuple[str, ...] = ()
    # Its other Deployments, waited for as ``deployment`` is.
    more_deployments: tuple[str, ...] = ()
    # Images that are not programs of ``module`` -> their programs (built on demand).
    more_programs: Callable[[], dict[str, str]] | None = None
    # Webhook configurations applied once its pods exist (see KATIB_V0_19).
    webhooks_after_pods: bool = False
    # Containers of its Deployments left out, by name: sidecars whose image no module here
    # builds and that nothing here uses (see KSERVE_V0_15).
    without_containers: tuple[str, ...] = ()
    # What cert-manager would do for it, done by the installer (see KSERVE_V0_15).
    issues_certificates: bool = False


TRAINING_OPERATOR_V1 = Operator(
    name="training-operator", module=TRAINING_OPERATOR,
    upstream="github.com/kubeflow/training-operator",
    kustomization="manifests/overlays/standalone",
    images={"training-operator": "training-operator"},
    namespace="kubeflow", deployment="training-operator")
JOBSET_V0_10 = Operator(
    name="jobset", module=JOBSET_0_10, upstream="sigs.k8s.io/jobset",
    kustomization="config/default", images={"jobset": "jobset"},
    namespace="jobset-system", deployment="jobset-controller-manager")
TRAINER_V2_1 = Operator(
    name="trainer", module=TRAINER_2_1, upstream="github.com/kubeflow/trainer/v2",
    kustomization="manifests/overlays/manager",
    images={"trainer-controller-manager": "trainer-controller-manager"},
    namespace="kubeflow-system", deployment="kubeflow-trainer-controller-manager",
    without=("../../third-party/jobset",))

# Kubeflow 26.03.1's Trainer and the JobSet release its manifests install
# (manifests/third-party/jobset/kustomization.yaml at v2.2.0: v0.11.0).
JOBSET_V0_11 = replace(JOBSET_V0_10, name="jobset-0.11", module=JOBSET_0_11)
TRAINER_V2_2 = replace(TRAINER_V2_1, name="trainer-2.2", module=TRAINER_2_2)

# Kueue as its release's manifests.yaml installs it (config/default: internal cert rotation,
# webhooks, the visibility API served through the aggregator), with its default configuration:
# the kubeflow.org/tfjob integration off, as v0.19 ships it.
KUEUE_V0_19 = Operator(
    name="kueue", module=KUEUE, upstream="sigs.k8s.io/kueue", kustomization="config/default",
    images={"kueue": "kueue"}, namespace="kueue-system", deployment="kueue-controller-manager")



def _katib_programs() -> dict[str, str]:
    module = module_dir(KATIB, katib_services.UPSTREAM)
    found = {image: str(path)
             for image, path in katib_services.build_python_services(module).items()}
    found["mysql"] = str(katib_services.mysql_program())
    return found


# Katib as its katib-standalone kustomization installs it into `kubeflow` (Kubeflow 26.03),
# less the UI, whose Angular frontend the module holds only as source. Its pod mutator
# (mutator.pod.katib.kubeflow.org) calls katib-controller for every pod created in namespaces
# labelled katib.kubeflow.org/metrics-collector-injection=enabled, `kubeflow` itself included
# (components/namespace/namespace.yaml), with failurePolicy Fail and only katib-controller's
# own requests exempt (components/webhook/webhooks.yaml 51-74): applied before Katib's pods
# exist, it refuses them all, its own controller's too. `kubectl apply -k` on a cluster wins
# that race by the ReplicaSet controller's speed; here the configurations wait for the pods.
# The Training Operator installs first: Katib watches the trial kinds whose CRDs exist when it
# starts (pkg/controller.v1beta1/trial/trial_controller.go 110-133).
KATIB_V0_19 = Operator(
    name="katib", module=KATIB, upstream=katib_services.UPSTREAM,
    kustomization="manifests/v1beta1/installs/katib-standalone",
    images={"katib-controller": "katib-controller", "katib-db-manager": "katib-db-manager",
            "file-metrics-collector": "file-metrics-collector",
            "suggestion-goptuna": "suggestion-goptuna"},
    namespace="kubeflow", deployment="katib-controller",
    without_objects=("katib-ui",), more_deployments=("katib-mysql", "katib-db-manager"),
    more_programs=_katib_programs, webhooks_after_pods=True)

# KServe as its config/default installs it into `kserve` (kserve v0.15.2 and v0.16.0
# config/default/kustomization.yaml, config/certmanager/), for Standard mode (RawDeployment):
# its controller manager and webhooks, the CRDs and `inferenceservice-config`. Left out: the
# local-model cache (its controller and node DaemonSet: another feature, off in the config's
# `localModel`); from v0.16 the LLMInferenceService controller (llmisvc: another feature, its
# own image), its webhooks and its LLMInferenceServiceConfigs, which those webhooks validate;
# and the manager's kube-rbac-proxy sidecar, which only guards the metrics port, and whose
# image is not a program of KServe's module. config/default asks cert-manager for the
# webhooks' certificate (a self-signed Issuer, Certificate `serving-cert` into Secret
# `kserve-webhook-server-cert`, its CA injected by `cert-manager.io/inject-ca-from` into the
# webhook configurations): the installer does those two steps itself
# (issue_webhook_certificate), as cert-manager installs from a Helm chart, which nothing here
# renders. One node runs one version (kserve-controller is one image name).
_KSERVE = dict(
    name="kserve", upstream="github.com/kserve/kserve", kustomization="config/default",
    images={"kserve-controller": "kserve-controller"}, namespace="kserve",
    deployment="kserve-controller-manager",
    without_objects=("kserve-localmodel-controller-manager", "kserve-localmodelnode-agent",
                     "llmisvc-controller-manager", "llminferenceservice.serving.kserve.io",
                     "llminferenceserviceconfig.serving.kserve.io"),
    without_kinds=("Certificate", "Issuer", "LLMInferenceServiceConfig"),
    without_containers=("kube-rbac-proxy",), issues_certificates=True)
KSERVE_V0_15 = Operator(module=KSERVE_0_15, **_KSERVE)  # Kubeflow 1.11
KSERVE_V0_16 = replace(KSERVE_V0_15, name="kserve-0.16", module=KSERVE_0_16)  # Kubeflow 26.03

# By the name `python -m localcluster up --operators` takes, in the order they install (Trainer
# needs JobSet's CRDs).
BY_NAME = {o.name: o for o in (TRAINING_OPERATOR_V1, JOBSET_V0_10, TRAINER_V2_1,
                                JOBSET_V0_11, TRAINER_V2_2, KUEUE_V0_19, KATIB_V0_19,
                                KSERVE_V0_15, KSERVE_V0_16)}


def module_dir(module: GoModule, upstream: str) -> Path:
    """Where the go command keeps ``upstream`` at the version ``module``'s go.mod pins."""
    answer = subprocess.run([go_command(), "list", "-m", "-json", upstream],
                            cwd=HERE / module.folder, capture_output=True, text=True, check=True)
    return Path(json.loads(answer.stdout)["Dir"])


def yaml_documents(text: str) -> list[Any]:
    """The documents of a YAML stream, empty ones left out, parsed by libyaml where PyYAML has
    it: an operator's release is megabytes of CRDs (KServe v0.16.0's: 1.6 s, against 8.3 s in
    pure Python, the same objects)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc]


_RENDERED: dict[str, list[dict[str, Any]]] = {}  # by the operator's repr: all its fields


def render(operator: Operator) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k`` of the operator's kustomization sends; each call gets
    its own copy. Rendered once per process: a second install of the operator (each test
    module that needs it installs it) re-applies the same objects, certificates included, so
    it changes nothing on the cluster instead of rotating the webhooks' serving certificate
    under the running operator, and skips kustomize."""
    import copy

    key = repr(operator)
    if key not in _RENDERED:
        _RENDERED[key] = _render(operator)
    return copy.deepcopy(_RENDERED[key])


def _render(operator: Operator) -> list[dict[str, Any]]:
    import yaml

    kustomize = build(KUSTOMIZE).path("kustomize")
    folder = module_dir(operator.module, operator.upstream) / operator.kustomization
    with tempfile.TemporaryDirectory() as scratch:
        if operator.without:  # the same kustomization less those resources, beside a copy
            spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
            back = os.path.relpath(folder, scratch)  # kustomize takes no absolute roots
            spec["resources"] = [f"{back}/{r}" for r in spec["resources"]
                                 if r not in operator.without]
            Path(scratch, "kustomization.yaml").write_text(yaml.safe_dump(spec))
            folder = Path(scratch)
        text = subprocess.run([str(kustomize), "build", "--load-restrictor",
                               "LoadRestrictionsNone", str(folder)], capture_output=True,
                              text=True, check=True).stdout
    objects = [doc for doc in yaml_documents(text)
               if doc["metadata"]["name"] not in operator.without_objects
               and doc["kind"] not in operator.without_kinds]
    for obj in objects:
        if obj["kind"] == "Deployment" and operator.without_containers:
            pod = obj["spec"]["template"]["spec"]
            pod["containers"] = [c for c in pod["containers"]
                                 if c["name"] not in operator.without_containers]
    if operator.issues_certificates:
        objects = issue_webhook_certificate(objects)
    return objects


CA_ANNOTATION = "cert-manager.io/inject-ca-from"


def issue_webhook_certificate(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``objects`` with what cert-manager does for a self-signed webhook Certificate: the
    serving certificate's Secret (``tls.crt``, ``tls.key``, ``ca.crt``, as cert-manager writes
    it) for the webhook Service's names, and the CA in the ``caBundle`` of every webhook
    configuration that carries ``cert-manager.io/inject-ca-from``. (KServe v0.15.2 and v0.16.0
    annotate their InferenceService CRD too, but it has no conversion webhook to inject.)"""
    import base64

    from localcluster import certs

    [service] = [o for o in objects if o["kind"] == "Service" and any(
        o["metadata"]["name"] == w["clientConfig"]["service"]["name"]
        for c in objects if c["kind"] in WEBHOOK_KINDS for w in c["webhooks"])]
    [deployment] = [o for o in objects if o["kind"] == "Deployment" and any(
        v.get("secret") for v in o["spec"]["template"]["spec"].get("volumes") or [])]
    [secret_name] = [v["secret"]["secretName"]
                     for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        ca = certs.make_ca(folder, common_name=f"{namespace}-selfsigned-issuer")
        certs.make_serving_cert(folder, "tls", ca, (f"{name}.{namespace}.svc",
                                                   f"{name}.{namespace}.svc.cluster.local"), ())
        files = {key: (folder / key).read_bytes() for key in ("tls.crt", "tls.key", "ca.crt")}
    bundle = base64.b64encode(files["ca.crt"]).decode()
    for obj in objects:
        if obj["kind"] in WEBHOOK_KINDS and CA_ANNOTATION in (
                obj["metadata"].get("annotations") or {}):
            for webhook in obj["webhooks"]:
                webhook["clientConfig"]["caBundle"] = bundle
    # First, as cert-manager's Secret exists before the pods that mount it start.
    return [{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
             "metadata": {"name": secret_name, "namespace": namespace},
             "data": {key: base64.b64encode(value).decode() for key, value in files.items()}},
            *objects]


def programs(operators: list[Operator]) -> dict[str, str]:
    """The node agent's ``--program`` map for ``operators``."""
    found: dict[str, str] = {}
    for operator in operators:
        built = build(operator.module)
        for repository, program in operator.images.items():
            path = str(built.path(program))
            if found.setdefault(repository, path) != path:
                raise ValueError(f"two versions of {repository} on one node ({operator.name} "
                                 "and another): start a cluster for each")
        if operator.more_programs is not None:
            found.update(operator.more_programs())
    return found


def install(api_client, operator: Operator) -> None:
    """Applies the operator's manifests, CRDs first, and waits for its Deployment."""
    objects = render(operator)
    order = {"Namespace": 0, "CustomResourceDefinition": 1}
    later = [o for o in objects if operator.webhooks_after_pods and o["kind"] in WEBHOOK_KINDS]
    first = [o for o in objects if o not in later]
    for obj in sorted(first, key=lambda o: order.get(o["kind"], 2)):
        apply(api_client, obj)
        if obj["kind"] == "CustomResourceDefinition":
            _wait_established(api_client, obj["metadata"]["name"])
    deployments = (operator.deployment, *operator.more_deployments)
    if later:
        for name in deployments:
            wait_pod_created(api_client, operator.namespace, name)
        for obj in later:
            apply(api_client, obj)
    for name in deployments:
        wait_available(api_client, operator.namespace, name)
    wait_webhooks_serving(api_client, [o["metadata"]["name"] for o in objects
                                       if o["kind"] in WEBHOOK_KINDS])


WEBHOOK_KINDS = {"ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
                 "MutatingWebhookConfiguration": "mutatingwebhookconfigurations"}


def wait_webhooks_serving(api_client, names: list[str], timeout: float = READY_SECONDS) -> None:
    """Until each webhook of the configurations ``names`` answers TLS at its Service's
    endpoint with a certificate its ``caBundle`` verifies, for the name the API server calls
    (``<service>.<namespace>.svc``): what the API server checks on every call. A Deployment is
    Available before its cert rotation has written the bundle and the server reloaded its
    certificate; a create in between fails with "x509: certificate signed by unknown
    authority"."""
    deadline = time.monotonic() + timeout
    for name in names:
        while (why := _webhooks_not_serving(api_client, name)) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"webhooks of {name} not serving after {timeout:.0f} s: "
                                   f"{why}")
            time.sleep(0.5)


def _webhooks_not_serving(api_client, name: str) -> str | None:
    """Why a webhook of configuration ``name`` cannot be called yet, or None."""
    import base64
    import socket
    import ssl

    config = None
    for plural in WEBHOOK_KINDS.values():
        try:
            config = _call(api_client, f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}",
                           "GET")
            break
        except Exception:  # the other kind
            continue
    if config is None:
        return "not found"
    for webhook in config.get("webhooks") or []:
        client_config = webhook.get("clientConfig") or {}
        service, bundle = client_config.get("service"), client_config.get("caBundle")
        if service is None:
            continue
        if not bundle:
            return f"{webhook['name']}: no caBundle yet"
        namespace, svc = service["namespace"], service["name"]
        spec = _call(api_client, f"/api/v1/namespaces/{namespace}/services/{svc}", "GET")
        port = next((p for p in spec["spec"]["ports"]
                     if p["port"] == service.get("port", 443)), None)
        endpoints = _call(api_client, f"/api/v1/namespaces/{namespace}/endpoints/{svc}", "GET")
        addresses = [(a["ip"], p["port"]) for subset in endpoints.get("subsets") or []
                     for a in subset.get("addresses") or [] for p in subset.get("ports") or []
                     if port is None or p.get("name") == port.get("name")]
        if not addresses:
            return f"{webhook['name']}: no ready endpoint of Service {namespace}/{svc}"
        context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
        try:
            with socket.create_connection(addresses[0], timeout=2) as raw, \
                    context.wrap_socket(raw, server_hostname=f"{svc}.{namespace}.svc"):
                pass
        except (OSError, ssl.SSLError) as error:
            return f"{webhook['name']}: {error}"
    return None


def apply(api_client, manifest: dict[str, Any]) -> dict[str, Any]:
    """``kubectl apply --server-side`` of ``manifest``: creates it, or sets the fields it
    names, keeping those other managers own. An operator's cert rotation writes its webhook
    configurations' ``caBundle``: a whole-object replace on a second install would clear it,
    and every call to those webhooks would fail TLS until the rotation wrote it again."""
    item = f"{collection_path(api_client, manifest)}/{manifest['metadata']['name']}"
    return api_client.call_api(
        item, "PATCH", body=manifest,
        query_params=[("fieldManager", "localcluster"), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml"},
        response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True)


def collection_path(api_client, manifest: dict[str, Any]) -> str:
    """The REST path of ``manifest``'s kind, found by discovery as kubectl finds it."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    group_path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    resources = _call(api_client, group_path, "GET")["resources"]
    [resource] = [r for r in resources if r["kind"] == kind and "/" not in r["name"]]
    if not resource["namespaced"]:
        return f"{group_path}/{resource['name']}"
    namespace = manifest.get("metadata", {}).get("namespace") or "default"
    return f"{group_path}/namespaces/{namespace}/{resource['name']}"


def wait_available(api_client, namespace: str, name: str,
                   timeout: float = READY_SECONDS) -> None:
    """Until Deployment ``name`` is Available with a ready pod."""
    _wait_deployment(api_client, namespace, name, "available", timeout, lambda status: (
        {c["type"]: c["status"] for c in status.get("conditions") or []}.get("Available")
        == "True" and (status.get("readyReplicas") or 0) >= 1))


def wait_pod_created(api_client, namespace: str, name: str,
                     timeout: float = READY_SECONDS) -> None:
    """Until Deployment ``name`` has a pod (its ``status.replicas``: the pods it targets)."""
    _wait_deployment(api_client, namespace, name, "with a pod", timeout,
                     lambda status: (status.get("replicas") or 0) >= 1)


def _wait_deployment(api_client, namespace: str, name: str, what: str, timeout: float,
                     done: Callable[[dict], bool]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        deployment = _call(api_client, f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
                           "GET")
        status = deployment.get("status") or {}
        if done(status):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Deployment {namespace}/{name} not {what} after "
                               f"{timeout:.0f} s: {status}"
                               + _pods_seen(api_client, namespace, deployment))
        time.sleep(0.2)


def _pods_seen(api_client, namespace: str, deployment: dict) -> str:
    """The Deployment's pods as ``kubectl describe`` and ``kubectl logs --tail`` would show
    them first: each container's state, and its log's last lines (why a pod is not ready)."""
    labels = deployment["spec"]["selector"].get("matchLabels") or {}
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    seen = []
    try:
        pods = _call(api_client, f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}",
                     "GET")["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                log = api_client.call_api(
                    f"/api/v1/namespaces/{namespace}/pods/{name}/log", "GET",
                    query_params=[("container", container["name"]), ("tailLines", "20")],
                    response_type="str", auth_settings=["BearerToken"],
                    _return_http_data_only=True)
                seen.append(f"\npod {name}, container {container['name']}: ready "
                            f"{container.get('ready')}, restarts "
                            f"{container.get('restartCount')}, state {container.get('state')}"
                            f"; its log's last lines:\n{log}")
    except Exception as error:  # the timeout is the error; what is seen only explains it
        seen.append(f"\n(its pods could not be read: {error})")
    return "".join(seen)


def _wait_established(api_client, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        crd = _call(api_client, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                    "GET")
        if any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or []):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not established")
        time.sleep(0.1)


def _call(api_client, path: str, method: str, body=None):
    return api_client.call_api(path, method, body=body, response_type="object",
                               auth_settings=["BearerToken"], _return_http_data_only=True)
