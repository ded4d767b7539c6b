"""Kubeflow's own RBAC, as its manifests ship it (``<tag>.yaml``, made by ``extract.py``), for
the API stand-in: what a profile's ``default-editor`` may do on a multi-user install."""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def cluster_roles(kubeflow: str) -> list[dict]:
    """The ClusterRoles kubeflow/manifests ``kubeflow`` aggregates into ``kubeflow-edit``."""
    return [doc for doc in yaml.safe_load_all((HERE / f"{kubeflow}.yaml").read_text()) if doc]


def kubeflow_profile(standin, namespace: str, kubeflow: str) -> None:
    """Stores Kubeflow's roles and what the profile controller creates for a profile: the
    ServiceAccount ``default-editor`` and its RoleBinding to ``kubeflow-edit`` (kubeflow/kubeflow
    v1.10.0 components/profile-controller/controllers/profile_controller.go L209-213, 592-632)."""
    for role in cluster_roles(kubeflow):
        standin.put(role)
    standin.put({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "default-editor", "namespace": namespace}})
    standin.put({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "default-editor", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "kubeflow-edit"},
                 "subjects": [{"kind": "ServiceAccount", "name": "default-editor",
                               "namespace": namespace}]})
