"""Kubeflow's own RBAC, as its manifests ship it (made by ``extract.py``), for the API stand-in:
what a profile's ``default-editor`` may do on a multi-user install. ``<tag>.yaml``: the roles the
tag's example install (``example/kustomization.yaml``) aggregates into ``kubeflow-edit``, Kubeflow
Trainer v2's among them and not the Training Operator v1's (commented out there at both tags);
``training-operator-<tag>.yaml``: those the Training Operator v1's own overlay
(``applications/training-operator/upstream/overlays/kubeflow``) adds when installed from the same
tag, as docs/first-run.md step 1 does."""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def _load(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((HERE / f"{name}.yaml").read_text()) if doc]


def cluster_roles(kubeflow: str, training_operator: bool = False) -> list[dict]:
    """The ClusterRoles kubeflow/manifests ``kubeflow``'s example install aggregates into
    ``kubeflow-edit`` (its Trainer v2's ``kubeflow-trainer-*`` among them); with
    ``training_operator``, also the Training Operator v1 overlay's ``kubeflow-training-*``
    (its ``kubeflow-training-roles.yaml``, applied by that overlay's kustomization.yaml L4-6)."""
    found = _load(kubeflow)
    return [*found, *_load(f"training-operator-{kubeflow}")] if training_operator else found


def training_operator_roles(kubeflow: str) -> list[dict]:
    """What ``kubectl apply -k …/applications/training-operator/upstream/overlays/kubeflow?ref=
    <kubeflow>`` adds to ``kubeflow-edit``: ``kubeflow-training-edit`` (TFJobs and the other v1
    jobs), ``-view``, ``-admin``."""
    return _load(f"training-operator-{kubeflow}")


def kubeflow_profile(standin, namespace: str, kubeflow: str,
                     training_operator: bool = False) -> None:
    """Stores Kubeflow's roles (:func:`cluster_roles`: the tag's stock example install, plus the
    Training Operator v1's when ``training_operator`` says it was installed) and what the profile
    controller creates for a profile: the ServiceAccount ``default-editor`` and its RoleBinding
    to ``kubeflow-edit`` (kubeflow/kubeflow v1.10.0
    components/profile-controller/controllers/profile_controller.go L209-213, 592-632)."""
    for role in cluster_roles(kubeflow, training_operator):
        standin.put(role)
    standin.put({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "default-editor", "namespace": namespace}})
    standin.put({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "default-editor", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "kubeflow-edit"},
                 "subjects": [{"kind": "ServiceAccount", "name": "default-editor",
                               "namespace": namespace}]})
