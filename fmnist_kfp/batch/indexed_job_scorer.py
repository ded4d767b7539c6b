"""Kubernetes backend: the shards run as an Indexed Job, one pod per shard.

The pods cannot see the step's artifact paths, so the model and the dataset are staged on the
shared volume (the dataset once per dataset, as training does), the pods write their shards
there, and the step copies them back into its output artifact. The Job is created and waited
for with the remote-job runner (:mod:`fmnist_kfp.kubernetes.runner`): a retried step re-attaches to
its Job by name, a failed Job fails the step with the controller's reason and is deleted, and a
terminated run deletes it (with its pods).
"""

from __future__ import annotations

import posixpath
import time

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.job import build_indexed_job, job_state
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.runner import JobStatus, RemoteJob, RemoteJobRunner, load_cluster_config
from fmnist_kfp.kubernetes.storage import copy_tree, make_shared_dirs, publish_copy, stage_dataset
from fmnist_kfp.kubernetes.workload import queued_status
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec, merge_shards
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.platform import PVC_ENV

_URI_SCHEMES = ("gs://", "s3://")


def _on_volume(path: str, mount_path: str) -> bool:
    mount = posixpath.normpath(mount_path)
    return posixpath.normpath(path) == mount or posixpath.normpath(path).startswith(mount + "/")


class IndexedJobScorer:
    """Runs a :class:`ScoringJobSpec` as an Indexed Job whose pods have ``settings`` (as
    :func:`fmnist_kfp.settings.jobs.cluster_settings` checked them where the step made them;
    checked again nowhere); ``batch_api`` (a ``BatchV1Api``) and ``runner`` are injectable for
    tests."""

    def __init__(self, settings: KubernetesSettings, batch_api=None,
                 runner: RemoteJobRunner | None = None, poll_seconds: float = 10.0):
        if not settings.pvc_name:
            raise UserInputError(
                "batch prediction on Kubernetes needs the shared claim its pods and this step "
                f"both mount: compile the pipeline with {PVC_ENV}=<claim>, or set pvc_name in "
                "the kubernetes parameter")
        self.settings = settings
        self._api = batch_api
        self.runner = runner or RemoteJobRunner.for_job(self.settings, poll_seconds=poll_seconds)

    @property
    def api(self):
        if self._api is None:
            from kubernetes import client

            load_cluster_config()
            self._api = client.BatchV1Api()
        return self._api

    def remote_spec(self, spec: ScoringJobSpec) -> ScoringJobSpec:
        """``spec`` with the model, dataset and output on the shared volume (staging them);
        a source the pods cannot read is refused first."""
        mount = self.settings.mount_path.rstrip("/")
        if spec.source and not spec.source.startswith(_URI_SCHEMES) and not _on_volume(
                spec.source, mount):
            raise UserInputError(
                f"batch prediction source {spec.source!r} is not where the Job's pods can read "
                f"it: use a gs:// or s3:// URI, or a path under {mount} (the shared volume)")
        root = f"{mount}/batch/{spec.name}"
        make_shared_dirs(root)  # the Job's pods write their shards in it, whatever our uid
        # A retried step re-attaches to the Job its first try created, whose pods may be
        # loading this model: published once, never rewritten.
        publish_copy(spec.model_dir, f"{root}/model")
        return spec.moved(model_dir=f"{root}/model",
                          data_dir=stage_dataset(spec.data_dir, f"{mount}/datasets"),
                          output_dir=f"{root}/predictions")

    def run(self, spec: ScoringJobSpec) -> dict:
        started = time.time()
        remote = self.remote_spec(spec)
        manifest = to_manifest(build_indexed_job(remote, self.settings))
        namespace, name = self.settings.target_namespace, spec.name

        def status(job) -> JobStatus:
            if not isinstance(job, dict):  # a V1Job model: as the API server sent it
                job = self.api.api_client.sanitize_for_serialization(job)
            done, failed, progress, reason = job_state(job)
            if not done and (job.get("spec") or {}).get("suspend"):
                # Kueue holds the Job suspended until its ClusterQueue admits it.
                from kubernetes import client

                return queued_status(client.CustomObjectsApi(self.api.api_client), namespace,
                                     job["metadata"])
            return JobStatus(done=done, failed=failed, progress=progress, reason=reason)

        def cleanup(why: str) -> None:
            # Background propagation: the pods go with the Job.
            self.api.delete_namespaced_job(name, namespace, propagation_policy="Background")

        self.runner.run(RemoteJob(
            kind="Job", namespace=namespace, name=name,
            create=lambda: self.api.create_namespaced_job(namespace, manifest),
            read=lambda: self.api.read_namespaced_job_status(name, namespace),
            status=status, cleanup=cleanup,
            describe_created=f"Indexed, {spec.num_shards} shard(s)"))
        summary = merge_shards(remote.output_dir, spec.num_shards)
        copy_tree(remote.output_dir, spec.output_dir)
        summary["job_seconds"] = round(time.time() - started, 3)
        return summary
