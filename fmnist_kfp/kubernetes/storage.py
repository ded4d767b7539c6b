"""Shared storage for cluster jobs: the dataset staged where TFJob pods read it, and job
outputs copied back into the step's artifacts (local paths, mounts, gs://, s3://).

Who may write the shared volume. The image runs as user 1000 in group 0 (``IMAGE_UID``,
``IMAGE_GID``), and so does every pod this package creates (:func:`pod_security_context`). A
pipeline step writes the volume first (the dataset copy, before any TFJob exists), and KFP
cannot give a step pod an ``fsGroup``: 2.15.0 sets only the workflow's ``runAsUser``, from
``PIPELINE_RUN_AS_USER``; 2.16.0 gives an executor pod only a seccomp profile, not
``runAsNonRoot`` (which it sets on KFP's own pods and init containers), and its main container
the admin's default ``runAsUser``/``runAsGroup``/``runAsNonRoot`` when configured
(kubeflow/pipelines 2.16.0 ``backend/src/v2/compiler/argocompiler/security_context.go``
L84-121 ``applySecurityContextToExecutorTemplate``, L144-161 ``applyPodSeccompProfileOnly``,
L163-198: no privilege escalation, capabilities dropped); per task only the container's
``runAsUser``/``runAsGroup``/``runAsNonRoot`` (kfp-kubernetes 2.17.0
``set_security_context`` sets no more). So the steps need the volume's root writable by uid 1000
or gid 0 before the first run
(the README's setup step 2; ``manifests/pvc`` checks it), and whatever they create there is
group-writable and setgid (:func:`make_shared_dirs`), so that pods of the same group can
write it whatever their uid. The pods the steps create also carry ``fsGroup: 0``: where the
volume's driver applies it (the kubelet makes the root group-0 owned, setgid, ``rw`` for the
group), that keeps the root usable; NFS and most ReadWriteMany CSI drivers ignore it.

The staged dataset is published atomically (:func:`stage_dataset`): steps running in parallel
(the three models' training and tuning steps) each copy into a temporary directory of their
own beside the target and rename it into place; a rename onto a directory that exists fails,
so a complete copy, which a TFJob may be reading, is never overwritten.

upstream: docs/upstream.md#kubeflow-pipelines
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import shutil
import stat
import uuid
from collections.abc import Callable

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.platform import IMAGE_GID, IMAGE_UID

SHARED_DIR_MODE = 0o2775  # rwxrwsr-x: the group writes, and what is made inside keeps the group
SETUP_HINT = (
    f"make the volume's root writable by group {IMAGE_GID} (or user {IMAGE_UID}) once: "
    "`kubectl apply -k manifests/pvc -n <namespace>` runs a Job that does it where the "
    "storage driver applies fsGroup, and on NFS or a driver that does not, whoever may "
    f"runs `chown {IMAGE_UID}:{IMAGE_GID} <root> && chmod 2775 <root>` on the export (README, "
    "'Setting up, once', step 2)")


def pod_security_context(with_volume: bool):
    """The pod-level ``securityContext`` of every pod this package creates (TFJob replicas,
    Katib trials, batch-prediction Jobs): the image's user and group, and with the shared
    volume mounted ``fsGroup: 0`` changed only when the root does not match
    (``OnRootMismatch``: no recursive walk of a large volume at every pod start).

    The Training Operator copies a replica's template into its pods as it is (kubeflow/trainer
    v1.9.2 pkg/controller.v1/common/pod.go lines 410-455; nothing in pkg/controller.v1 sets a
    securityContext), and Katib creates the trial's TFJob from the template with only its
    placeholders, name and namespace replaced (kubeflow/katib v0.19.0
    pkg/controller.v1beta1/experiment/manifest/generator.go lines 89-107,
    pkg/controller.v1beta1/trial/trial_controller.go line 295). Pod-level fields apply to
    Katib's metrics-collector sidecar too, which runs as the trainer's user then."""
    from kubernetes import client

    return client.V1PodSecurityContext(
        run_as_user=IMAGE_UID,
        run_as_group=IMAGE_GID,
        fs_group=IMAGE_GID if with_volume else None,
        fs_group_change_policy="OnRootMismatch" if with_volume else None,
    )


def _is_uri(path: str) -> bool:
    return "://" in path


def make_shared_dirs(path: str) -> None:
    """Creates ``path`` and its missing parents on the shared volume, each ``rwxrwsr-x``
    whatever the umask, so that every pod of group 0 can write in them; a root this step may
    not write stops it with the fix. Object-store URIs have no directories: left alone."""
    if _is_uri(path):
        return
    missing = []
    current = posixpath.normpath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = posixpath.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, SHARED_DIR_MODE)
        except FileExistsError:
            continue  # another step made it first
        except PermissionError as error:
            raise UserInputError(_not_writable(directory, error)) from error
        try:
            os.chmod(directory, SHARED_DIR_MODE)  # mkdir's mode went through the umask
        except PermissionError:
            pass  # not ours: someone made it in between, as this code does


def _not_writable(directory: str, error: OSError) -> str:
    parent = posixpath.dirname(directory)
    try:
        info = os.stat(parent)
        owner = (f"owned by {info.st_uid}:{info.st_gid} with mode "
                 f"{stat.S_IMODE(info.st_mode):04o}")
    except OSError:
        owner = "not readable"
    return (f"cannot create {directory} on the shared volume ({error.strerror}): {parent} is "
            f"{owner}, and this step runs as uid {os.getuid()}, gid {os.getgid()} with no "
            f"fsGroup (KFP sets none on pipeline steps); {SETUP_HINT}")


def copy_tree(source: str, destination: str, last: str = "") -> None:
    """Copies a directory with ``tf.io.gfile`` (local paths, mounts, gs://, s3://); the
    top-level file named ``last`` is copied after everything else (a completion marker)."""
    import tensorflow as tf

    deferred = None
    for directory, _, files in tf.io.gfile.walk(source):
        target = destination + directory[len(source.rstrip("/")):]
        tf.io.gfile.makedirs(target)
        for name in files:
            if name == last and target == destination:
                deferred = (f"{directory}/{name}", f"{target}/{name}")
                continue
            tf.io.gfile.copy(f"{directory}/{name}", f"{target}/{name}", overwrite=True)
    if deferred:
        tf.io.gfile.copy(*deferred, overwrite=True)


def dataset_key(metadata: dict) -> str:
    """The staged copy's name: from the dataset's checksums and ingestion time."""
    return hashlib.sha256(
        repr(sorted(metadata.get("sha256", {}).items())).encode()
        + metadata.get("ingested_at", "").encode()
    ).hexdigest()[:16]


def publish_copy(source: str, target: str, *, marker: str = "",
                 before_publish: Callable[[str], None] | None = None) -> str:
    """Copies the directory ``source`` to ``target`` on the mounted volume, atomically, and
    returns ``target``; a published copy is reused, never overwritten (a job may be reading
    it).

    The copy goes into a directory of its own beside the target (``marker``, a top-level file,
    last), and is renamed into place: a rename is atomic, and renaming a directory onto one
    that exists and is not empty fails (POSIX rename(2), ENOTEMPTY/EEXIST; NFS too), so of two
    steps publishing the same copy at once one publishes and the other discards its copy and
    uses the winner's. With ``marker``, a target without it is an incomplete copy an older,
    non-atomic version left: refused, naming it. ``before_publish`` (tests) runs with the
    temporary directory before the rename."""
    import tensorflow as tf

    if _is_uri(target):
        raise ValueError(f"{target!r} must be on a mounted volume: publishing a copy relies on "
                         "an atomic directory rename")
    target = target.rstrip("/")
    parent, name = posixpath.split(target)

    def published() -> bool:
        return tf.io.gfile.exists(f"{target}/{marker}" if marker else target)

    if published():
        return target
    make_shared_dirs(parent)
    staging = f"{parent}/.{name}.{uuid.uuid4().hex}"
    done = False
    try:
        copy_tree(source, staging, last=marker)
        if before_publish is not None:
            before_publish(staging)
        try:
            os.rename(staging, target)
            done = True
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not published():
                # Only a copy made before publishing was atomic can be there without its
                # marker; nothing reads it, but another step may still be writing it.
                raise UserInputError(
                    f"{target} holds an incomplete copy (no {marker}), left by an interrupted "
                    "copy of an earlier version of this package; no job reads it: delete that "
                    "directory and run again") from error
    finally:
        if not done:  # lost the race, or failed: our copy goes
            shutil.rmtree(staging, ignore_errors=True)
    return target


def stage_dataset(data_dir: str, shared_root: str,
                  before_publish: Callable[[str], None] | None = None) -> str:
    """Copies the dataset to ``shared_root`` (a directory on the mounted volume) under a name
    from its checksums, ``metadata.json`` last, and returns where (:func:`publish_copy`): of
    steps staging the same dataset at once one copy is published, and none is ever rewritten
    while a job reads it."""
    from fmnist_kfp.dataset.records import METADATA_FILE

    if _is_uri(shared_root):
        raise ValueError(f"the dataset is staged on a mounted volume, not {shared_root!r}: "
                         "publishing it relies on an atomic directory rename")
    return publish_copy(data_dir, staged_location(data_dir, shared_root), marker=METADATA_FILE,
                        before_publish=before_publish)


def staged_location(data_dir: str, shared_root: str) -> str:
    """Where :func:`stage_dataset` puts the dataset at ``data_dir`` under ``shared_root``,
    known before anything is copied (from its ``metadata.json`` alone), so that a job can be
    made and checked with its final dataset path first."""
    from fmnist_kfp.dataset.records import read_metadata

    return f"{shared_root.rstrip('/')}/{dataset_key(read_metadata(data_dir))}"
