"""A stand-in for a cluster network that enforces NetworkPolicy: whether a connection from a pod
to a pod port is admitted by the NetworkPolicies stored in an API stand-in. It is no CNI; it
evaluates only the ingress rules below, each from upstream:

* A pod is isolated for ingress when some NetworkPolicy of its namespace selects it
  (``spec.podSelector``) with ``Ingress`` in ``policyTypes`` (absent ``policyTypes``: Ingress);
  a pod no policy selects admits everything. An isolated pod admits a connection that *some*
  selecting policy's ingress rule allows: policies are additive, never deny (k8s.io/api
  ``networking/v1/types.go``, the doc comments of ``NetworkPolicySpec`` ``podSelector``,
  ``ingress`` and ``policyTypes``; line numbers not pinned here).
* An ingress rule allows a connection when its ``from`` (empty: every source) has a peer that
  matches the source and its ``ports`` (empty: every port) hold the destination port and
  protocol (``NetworkPolicyIngressRule``, ``NetworkPolicyPort``). A peer with only
  ``podSelector`` selects pods of the policy's own namespace; with only ``namespaceSelector``
  every pod of the selected namespaces; with both, pods matching the first in namespaces
  matching the second (``NetworkPolicyPeer``); ``ipBlock`` peers are not modelled (pods are
  addressed by label here).
* Label selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist),
  all terms ANDed; an empty selector selects everything (k8s.io/apimachinery
  ``pkg/apis/meta/v1/helpers.go`` ``LabelSelectorAsSelector``). A namespace carries
  ``kubernetes.io/metadata.name`` (set by the API server since Kubernetes 1.21, the
  NamespaceDefaultLabelName feature).

And what the Kubeflow release installs there: :data:`KUBEFLOW_2603_ISTIO_SYSTEM` are, verbatim,
the NetworkPolicies of kubeflow/manifests 26.03 ``common/istio/istio-namespace/base``
(``default-allow-same-namespace.yaml`` L1-12, ``allow-knative-to-istio-gateways.yaml`` L1-24,
``allow-istiod-control-plane.yaml`` L1-17), new in 26.03 (commit fcd884f71, #3342) and applied
by its ``example/kustomization.yaml`` L40. Where a cluster-local URL leads
(:func:`destination`): a Serverless predictor's host to the Service ``knative-local-gateway``
in ``istio-system``, port 80 → 8081 on the ``cluster-local-gateway`` pods (kubeflow/manifests
26.03 ``common/knative/knative-serving/base/upstream/net-istio.yaml`` L58-79, with
``overlays/gateways/patches/gateway-selector-in-istio-system.yaml`` L1-9); a Standard
(raw) predictor's host to its own pods, port 8080 (KServe's default container port; not
pinned to a tag here: the 26.03 istio-system policies do not touch it).
"""

from __future__ import annotations

import yaml

GATEWAY_NAMESPACE = "istio-system"
GATEWAY_LABELS = {"app": "cluster-local-gateway", "istio": "cluster-local-gateway"}
GATEWAY_PORT = 8081
PREDICTOR_PORT = 8080
PROFILE_LABEL = {"app.kubernetes.io/part-of": "kubeflow-profile"}  # namespace-labels.yaml L18

KUBEFLOW_2603_ISTIO_SYSTEM = [doc for doc in yaml.safe_load_all("""
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: default-allow-same-namespace-istio-system
  namespace: istio-system
spec:
  podSelector: {}
  ingress:
  - from:
    - podSelector: {}
  policyTypes:
  - Ingress
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-knative-to-istio-gateways
  namespace: istio-system
spec:
  podSelector:
    matchExpressions:
    - key: app
      operator: In
      values:
      - istio-ingressgateway
      - cluster-local-gateway
  ingress:
  - from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: knative-serving
    ports:
    - protocol: TCP
      port: 8080
  policyTypes:
  - Ingress
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-istiod-control-plane
  namespace: istio-system
spec:
  podSelector:
    matchLabels:
      app: istiod
  ingress:
  - ports:
    - protocol: TCP
      port: 15012
  policyTypes:
  - Ingress
""") if doc]


def selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against ``labels``; {} selects all."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels")
                                                       or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, operator, values = term["key"], term["operator"], term.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def namespace_labels(objects: dict, namespace: str) -> dict:
    """A namespace's labels as stored, with the ``kubernetes.io/metadata.name`` the API server
    always sets."""
    stored = objects.get(("Namespace", "", namespace)) or {}
    return {**((stored.get("metadata") or {}).get("labels") or {}),
            "kubernetes.io/metadata.name": namespace}


def _peer_matches(peer: dict, policy_namespace: str, source: tuple, objects: dict) -> bool:
    source_namespace, source_labels = source
    if "ipBlock" in peer:
        return False
    pods, namespaces = peer.get("podSelector"), peer.get("namespaceSelector")
    if namespaces is None:
        in_scope = source_namespace == policy_namespace
    else:
        in_scope = selects(namespaces, namespace_labels(objects, source_namespace))
    return in_scope and (pods is None or selects(pods, source_labels))


def _port_matches(ports: list | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    return any((entry.get("protocol") or "TCP") == protocol
               and (entry.get("port") is None or entry.get("port") == port
                    or (entry.get("endPort") is not None
                        and entry["port"] <= port <= entry["endPort"]))
               for entry in ports)


def admits(objects: dict, source: tuple[str, dict], destination: tuple[str, dict, int],
           protocol: str = "TCP") -> tuple[bool, str]:
    """Whether a connection from ``source`` (namespace, pod labels) to ``destination``
    (namespace, pod labels, port) is admitted by the NetworkPolicies in ``objects`` (an API
    stand-in's store), and which policy decided: ``(True, "")`` when no policy isolates the
    pod."""
    namespace, labels, port = destination
    isolating = []
    for (kind, ns, name), policy in list(objects.items()):
        if kind != "NetworkPolicy" or ns != namespace:
            continue
        spec = policy.get("spec") or {}
        types = spec.get("policyTypes") or ["Ingress"]
        if "Ingress" not in types or not selects(spec.get("podSelector"), labels):
            continue
        isolating.append(name)
        for rule in spec.get("ingress") or []:
            peers = rule.get("from")
            if (not peers or any(_peer_matches(peer, namespace, source, objects)
                                 for peer in peers)) \
                    and _port_matches(rule.get("ports"), port, protocol):
                return True, name
    if not isolating:
        return True, ""
    return False, ", ".join(sorted(isolating))


def destination(mode: str, namespace: str, isvc: str) -> tuple[str, dict, int]:
    """The pod a cluster-local predictor URL reaches first (the module docstring)."""
    if mode == "Standard":
        return namespace, {"component": "predictor",
                           "serving.kserve.io/inferenceservice": isvc}, PREDICTOR_PORT
    return GATEWAY_NAMESPACE, dict(GATEWAY_LABELS), GATEWAY_PORT


def install_kubeflow_2603(standin, *profiles: str) -> None:
    """What Kubeflow 26.03 puts on the cluster that decides the path: its istio-system
    NetworkPolicies and, for each of ``profiles``, the namespace with the profile controller's
    labels."""
    for name in ("istio-system", "knative-serving", "kubeflow"):
        if ("Namespace", "", name) not in standin.objects:
            standin.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for profile in profiles:
        standin.put({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": profile, "labels": dict(PROFILE_LABEL)}})
    for policy in KUBEFLOW_2603_ISTIO_SYSTEM:
        standin.put(policy)
