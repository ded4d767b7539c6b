"""Reading an InferenceService the way KServe writes it: its deployment mode, its addresses,
and whether a write has been rolled out.

The rules come from KServe's source at the versions Kubeflow ships (0.14.1, 0.15.0, 0.15.2) and
the newest (0.20.0):

* Modes: ``Serverless`` (Knative; Kubeflow's and KServe's install default) and raw mode,
  spelled ``RawDeployment`` up to 0.15 and ``Standard`` from 0.16, which still reads the old
  names. ``status.deploymentMode`` exists from 0.15.1 and wins over the annotation; on
  0.14/0.15 an annotation value the version does not know falls back to the configured default.
* Addresses: from a pod, only the cluster-local ``status.address.url`` works (Kubeflow's
  Knative domain is ``example.com``); a tag's cluster-local host is ``<tag>-<predictor
  service>.<namespace>.svc.cluster.local``.
* Rolled out: Serverless copies the Knative Service's status, observedGeneration included:
  that counts the *Knative Service's* generations, which move once per change KServe renders
  into it, not once per write to the InferenceService, so a Serverless rollout is judged on
  the revisions and traffic of that same status (``rollout_serverless``). Standard copies the
  Deployment's, so a Standard rollout is judged on the Deployment itself. Neither compares
  observedGeneration with the InferenceService's own generation.

upstream: docs/upstream.md#kserve, #knative-serving
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

SERVERLESS = "Serverless"
STANDARD = "Standard"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS_ANNOTATION = "serving.kserve.io/autoscalerClass"
_CANONICAL = {"Serverless": SERVERLESS, "Knative": SERVERLESS,
              "RawDeployment": STANDARD, "Standard": STANDARD}
# What KServe 0.14/0.15 recognize in the annotation (utils.go v0.15.2 L184-186).
_LEGACY_NAMES = ("Serverless", "RawDeployment")
# KServe's inferenceservice-config: in "kubeflow" on Kubeflow, in "kserve" on its own install.
KSERVE_CONFIGMAP = "inferenceservice-config"
KSERVE_CONFIG_NAMESPACES = ("kubeflow", "kserve")
CANARY_TAG = "latest"


def canonical_mode(value: str | None) -> str | None:
    """``Serverless`` or ``Standard`` for any spelling KServe uses, else None."""
    return _CANONICAL.get(value or "")


@dataclass(frozen=True)
class DeploymentMode:
    """The mode an InferenceService runs in and the annotation value to write (None: none)."""

    mode: str
    annotation: str | None
    source: str

    @property
    def serverless(self) -> bool:
        return self.mode == SERVERLESS


def default_mode_from_config(data: dict | None) -> str | None:
    """The spelling of ``defaultDeploymentMode`` in inferenceservice-config's ``deploy`` key
    (kserve v0.20.0 config/configmap/inferenceservice.yaml L743-746), or None."""
    try:
        value = json.loads((data or {}).get("deploy") or "{}").get("defaultDeploymentMode")
    except (TypeError, ValueError, AttributeError):
        return None
    return value if canonical_mode(value) else None


def _annotations(isvc: dict) -> dict[str, str]:
    return dict((isvc.get("metadata") or {}).get("annotations") or {})


def mode_of(isvc: dict, cluster_default: str | None) -> DeploymentMode:
    """The mode an existing InferenceService runs in, and the annotation an update must carry.

    An update must keep the mode and, where the status records it, spell the annotation as the
    status does: KServe's webhook refuses any other value (``validateDeploymentMode``,
    ``inference_service_validation.go`` v0.15.2 L447-457, v0.16.0 L493-503)."""
    status_value = (isvc.get("status") or {}).get("deploymentMode")
    annotated = _annotations(isvc).get(MODE_ANNOTATION)
    default = canonical_mode(cluster_default) or SERVERLESS
    if status_mode := canonical_mode(status_value):
        mode, source = status_mode, f"status.deploymentMode={status_value}"
        spelling = status_value
    elif annotated and (annotated_mode := canonical_mode(annotated)) and (
            annotated in _LEGACY_NAMES or not (isvc.get("status") or {}).get("conditions")):
        mode, source, spelling = annotated_mode, f"annotation {annotated}", annotated
    else:
        # No status field (KServe 0.14/0.15.0) and no annotation that version knows: the default.
        mode, source = default, f"the cluster's default ({cluster_default or 'Serverless'})"
        spelling = cluster_default if canonical_mode(cluster_default) == mode else None
    if annotated is not None or mode == STANDARD:
        annotation = spelling or annotated or "RawDeployment"
    else:
        annotation = None
    return DeploymentMode(mode, annotation, source)


def mode_for_new(setting: str, cluster_default: str | None) -> DeploymentMode:
    """The mode of an InferenceService about to be created: the setting, else the cluster's
    default, else Serverless (the default of KServe's and Kubeflow's installs, F1.2/F1.3).

    Serverless leaves the annotation out when the cluster defaults to it (Kubeflow's way); raw
    mode always carries it, because KServe's webhook picks its autoscaler rules by the
    annotation alone (``validateAutoScalingCompExtension``, v0.15.2 L210-230)."""
    default = canonical_mode(cluster_default)
    if setting:
        mode = canonical_mode(setting)
        if mode is None:  # the setting's own check refuses it first
            raise ValueError(f"serving.deployment_mode={setting!r} is not a KServe mode")
        annotation = None if mode == SERVERLESS and default in (None, SERVERLESS) else setting
        return DeploymentMode(mode, annotation, f"serving.deployment_mode={setting}")
    if default == STANDARD:
        return DeploymentMode(STANDARD, cluster_default, f"the cluster's default "
                                                         f"({cluster_default})")
    if default == SERVERLESS:
        return DeploymentMode(SERVERLESS, None, f"the cluster's default ({cluster_default})")
    return DeploymentMode(SERVERLESS, None, "KServe's default (Serverless): the cluster's "
                                            "inferenceservice-config could not be read")


# -- conditions and addresses ------------------------------------------------------------------


def condition(isvc: dict, kind: str) -> dict:
    for entry in (isvc.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return entry
    return {}


def is_true(isvc: dict, kind: str = "Ready") -> bool:
    return condition(isvc, kind).get("status") == "True"


def generation(obj: dict) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


def observed_generation(obj: dict) -> int:
    return int((obj.get("status") or {}).get("observedGeneration") or 0)


def predictor_status(isvc: dict) -> dict:
    return ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}


_REVISION_FIELDS = ("latestCreatedRevision", "latestReadyRevision", "latestRolledoutRevision",
                    "previousRolledoutRevision")


def revisions_named(isvc: dict) -> set[str]:
    """Every Knative revision the predictor's status names (its revision fields and its
    traffic targets)."""
    predictor = predictor_status(isvc)
    names = {predictor.get(key) for key in _REVISION_FIELDS}
    names |= {target.get("revisionName") for target in predictor.get("traffic") or []}
    return {name for name in names if name}


def external_url(isvc: dict) -> str | None:
    """``status.url``: what users outside the cluster call (through the ingress gateway)."""
    return (isvc.get("status") or {}).get("url")


def _address(block: dict) -> str | None:
    return ((block or {}).get("address") or {}).get("url")


def cluster_local_url(isvc: dict) -> str | None:
    """The address pods reach: ``status.address.url``, else the predictor's."""
    return _address(isvc.get("status") or {}) or _address(predictor_status(isvc))


def tag_url(isvc: dict, tag: str = CANARY_TAG) -> str | None:
    """The cluster-local URL of a Knative traffic tag: ``<tag>-`` before the predictor's
    cluster-local host. None when no traffic target carries the tag (tag routing is off)."""
    predictor = predictor_status(isvc)
    if not any(target.get("tag") == tag for target in predictor.get("traffic") or []):
        return None
    address = _address(predictor)
    if not address:
        return None
    parts = urlsplit(address)
    return urlunsplit((parts.scheme, f"{tag}-{parts.netloc}", parts.path, "", ""))


def latest_target(isvc: dict) -> dict:
    for target in predictor_status(isvc).get("traffic") or []:
        if target.get("latestRevision"):
            return target
    return {}


def pinned_target(isvc: dict) -> dict:
    for target in predictor_status(isvc).get("traffic") or []:
        if not target.get("latestRevision"):
            return target
    return {}


def describe(isvc: dict) -> str:
    """One line for progress logs: Ready, its reason, the revisions and the traffic."""
    ready = condition(isvc, "Ready")
    predictor = predictor_status(isvc)
    parts = [f"Ready={ready.get('status', 'Unknown')}"]
    if ready.get("reason"):
        parts.append(f"({ready.get('reason')}: {ready.get('message', '')})")
    if predictor.get("latestCreatedRevision"):
        parts.append(f"revisions created={predictor.get('latestCreatedRevision')} "
                     f"ready={predictor.get('latestReadyRevision', '-')} "
                     f"rolled out={predictor.get('latestRolledoutRevision', '-')}")
    traffic = [f"{target.get('revisionName', '?')} {target.get('percent', 0)}%"
               + (f" ({target['tag']})" if target.get("tag") else "")
               for target in predictor.get("traffic") or []]
    if traffic:
        parts.append("traffic " + ", ".join(traffic))
    return " ".join(parts)


# -- Standard mode: the Deployment -------------------------------------------------------------


def predictor_deployment_name(isvc_name: str) -> str:
    """``<isvc>-predictor`` (kserve v0.15.2 pkg/constants/constants.go L580-582)."""
    return f"{isvc_name}-predictor"


def deployment_rolled_out(deployment: dict | None) -> bool:
    """The Deployment has observed its spec and every replica runs it and is available: the
    rule of ``kubectl rollout status`` (kubernetes/kubectl @53ef3abb ``pkg/polymorphichelpers/
    rollout_status.go``, ``DeploymentStatusViewer.Status``)."""
    if not deployment or deployment_failed(deployment):
        return False
    status = deployment.get("status") or {}
    if observed_generation(deployment) < generation(deployment):
        return False
    updated = int(status.get("updatedReplicas") or 0)
    wanted = (deployment.get("spec") or {}).get("replicas")
    if wanted is not None and updated < int(wanted):
        return False
    replicas = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    return replicas <= updated and available >= updated


def deployment_failed(deployment: dict | None) -> str | None:
    """Why the Deployment's rollout cannot finish, if it says so (ProgressDeadlineExceeded)."""
    for entry in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == "Progressing" and entry.get("reason") == \
                "ProgressDeadlineExceeded":
            return entry.get("message") or "ProgressDeadlineExceeded"
    return None
