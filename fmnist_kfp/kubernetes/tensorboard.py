"""Kubeflow ``Tensorboard`` resources (``tensorboards.tensorboard.kubeflow.org``, v1alpha1).

The training step points one at its job's logs so the Kubeflow dashboard's TensorBoards page (and
the link in the step's Markdown output) serves them. The resource is long-lived: created if
absent, re-attached on a retry, left in place when the step ends; RBAC through ``kubeflow-edit``
grants only create/get/list/delete on it, so it is never patched.

``spec.logspath`` forms the controller understands: ``pvc://<claim>/<subpath>`` (mounted
read-only at ``/tensorboard_logs/``), ``gs://`` (with the ``user-gcp-sa`` Secret) and ``s3://``
(no credentials injected: a PodDefault selected by the resource's labels must bring them).

upstream: docs/upstream.md#kubeflow-controllers, #kubeflow-manifests
"""

from __future__ import annotations

import posixpath
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes import keys
from fmnist_kfp.settings.names import is_dns_1035_label

GROUP = "tensorboard.kubeflow.org"
VERSION = "v1alpha1"
PLURAL = "tensorboards"
KIND = "Tensorboard"
API_VERSION = f"{GROUP}/{VERSION}"


def logs_path(log_dir: str, *, pvc_name: str = "", mount_path: str = "") -> str:
    """``spec.logspath`` for logs at ``log_dir``: a path under the shared claim's mount becomes
    ``pvc://<claim>/<path inside the claim>``; ``gs://`` and ``s3://`` stay (``minio://``, KFP's
    name for its S3 store, becomes ``s3://``); anything else cannot be served."""
    if log_dir.startswith("minio://"):
        log_dir = "s3://" + log_dir[len("minio://"):]
    if log_dir.startswith(("gs://", "s3://")):
        return log_dir
    mount = posixpath.normpath(mount_path or "/") if mount_path else ""
    path = posixpath.normpath(log_dir)
    if pvc_name and mount and (path == mount or path.startswith(mount.rstrip("/") + "/")):
        inside = posixpath.relpath(path, mount)
        return f"pvc://{pvc_name}" + ("" if inside == "." else f"/{inside}")
    raise UserInputError(
        f"TensorBoard logs at {log_dir!r} are neither on the shared claim ({pvc_name or 'none'} "
        f"mounted at {mount_path or 'nowhere'}) nor in a bucket; set kubernetes.pvc_name so the "
        "training job writes them where a Tensorboard can mount them")


def build_tensorboard(name: str, namespace: str, logspath: str,
                      labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``Tensorboard`` manifest; the controller names its Deployment, Service and
    VirtualService after it, hence a DNS-1035 label."""
    if not is_dns_1035_label(name):
        raise UserInputError(f"Tensorboard name {name!r} must be a DNS-1035 label (lowercase "
                             "letters, digits and '-', starting with a letter, at most 63)")
    if not logspath:
        raise UserInputError("a Tensorboard needs spec.logspath (pvc://, gs:// or s3://)")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {**keys.PART_OF, **(labels or {})}},
        "spec": {"logspath": logspath},
    }


def dashboard_path(namespace: str, name: str) -> str:
    """Where the Kubeflow gateway serves it: the controller's VirtualService prefix
    ``/tensorboard/<namespace>/<name>/`` (tensorboard_controller.go, ``generateVirtualService``)."""
    return f"/tensorboard/{namespace}/{name}/"


def ensure_tensorboard(manifest: dict[str, Any], custom_api=None, runner=None) -> dict:
    """Creates the ``Tensorboard`` or re-attaches to the one a previous try of the step made
    (the runner's create-or-reattach: a 409 means it is there), and returns without waiting:
    the resource outlives the step and is never cleaned up by it."""
    from fmnist_kfp.kubernetes.runner import (
        JobStatus,
        RemoteJob,
        RemoteJobRunner,
        load_cluster_config,
    )

    if custom_api is None:
        from kubernetes import client

        load_cluster_config()
        custom_api = client.CustomObjectsApi()
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    return (runner or RemoteJobRunner()).run(RemoteJob(
        kind=KIND, namespace=namespace, name=name,
        create=lambda: custom_api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest),
        read=lambda: custom_api.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name),
        status=lambda current: JobStatus(done=True),
        cleanup=lambda why: None,  # long-lived: left in place whatever happens to the step
        describe_created=f"logs {manifest['spec']['logspath']}"))
