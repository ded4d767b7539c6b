"""The Kubernetes backend: each training job is a Kubeflow TFJob.

It behaves like a well-made remote-job launcher (google-cloud-pipeline-components' pattern):

* the job name is deterministic (from the pipeline run and task), so a retried launcher pod
  re-attaches to the TFJob it created instead of starting a second one;
* it waits with the kubeflow-training SDK, printing each state change, and streams the chief's
  log while the job runs (or prints it when the job ended before it was seen running);
* it fails the step when the TFJob fails, naming the operator's reason;
* it deletes the TFJob when the run is terminated (SIGTERM) or the step's deadline passes.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from fmnist.backends import sigterm_as_exit
from fmnist.errors import TrainingJobError
from fmnist.kubernetes.tfjob import build_tfjob
from fmnist.settings.jobs import KubernetesSettings
from fmnist.training.job import TrainingJobResult, TrainingJobSpec
from fmnist.training.trainer import read_result

TFJOB_KIND = "TFJob"
TFJOB_PLURAL = "tfjobs"


class TFJobLauncher:
    """Runs a training job as a TFJob; see the module docstring."""

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        training_client=None,
        poll_seconds: float = 10.0,
        timeout_seconds: float = 0.0,
        out=None,
        **setting_overrides,
    ):
        if settings is None:
            from fmnist.settings.platform import component_image

            typed = KubernetesSettings.from_dict(setting_overrides).as_dict()
            settings = KubernetesSettings(image=component_image(), **typed)
        self.settings = settings.validate()
        self._client = training_client
        self.poll_seconds = poll_seconds
        # The step's own deadline: the job's, plus time for pods to be scheduled and cleaned.
        deadline = self.settings.active_deadline_seconds
        self.timeout_seconds = timeout_seconds or (deadline + 600 if deadline else 0)
        self.out = out or sys.stdout

    @property
    def namespace(self) -> str:
        return self.settings.target_namespace

    @property
    def client(self):
        if self._client is None:
            from kubeflow.training import TrainingClient

            self._client = TrainingClient(namespace=self.namespace, job_kind=TFJOB_KIND)
        return self._client

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def _exists(self, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.client.custom_api.get_namespaced_custom_object(
                "kubeflow.org", "v1", self.namespace, TFJOB_PLURAL, name
            )
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def _delete(self, name: str) -> None:
        try:
            self.client.delete_job(name, namespace=self.namespace, job_kind=TFJOB_KIND)
            self._say(f"deleted TFJob {self.namespace}/{name}")
        except RuntimeError as err:  # already gone, or the API is unreachable: say so
            self._say(f"could not delete TFJob {name}: {err}")

    def _conditions(self, name: str) -> list:
        return self.client.get_job_conditions(
            name=name, namespace=self.namespace, job_kind=TFJOB_KIND
        )

    def _logs(self, name: str) -> str:
        try:
            logs, _ = self.client.get_job_logs(
                name, namespace=self.namespace, job_kind=TFJOB_KIND
            )
        except Exception as err:  # logs are a courtesy; the job's outcome is what counts
            return f"(no logs: {err})"
        return "\n".join(f"[{pod}] {text}" for pod, text in logs.items())

    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        tfjob = build_tfjob(spec, self.settings)  # validates before anything is created
        name = spec.name
        started = time.time()
        if self._exists(name):
            self._say(f"re-attaching to the existing TFJob {self.namespace}/{name}")
        else:
            self.client.create_job(job=tfjob, namespace=self.namespace)
            self._say(f"created TFJob {self.namespace}/{name} "
                      f"({spec.replicas} replicas)")
        previous = sigterm_as_exit()
        try:
            state = self._wait(name, started)
        except BaseException:  # terminated (SIGTERM), timed out, or interrupted
            self._delete(name)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        if self._streamer is not None:
            self._streamer.join(timeout=30)  # the pods have exited: the stream drains
        else:
            self._say(self._logs(name))
        if state.type != "Succeeded":
            raise TrainingJobError(
                f"TFJob {self.namespace}/{name} failed: {state.reason}: {state.message}"
            )
        # The work dir is on shared storage: a PVC mount or a bucket.
        return TrainingJobResult(read_result(spec.work_dir), round(time.time() - started, 2), 0)

    def _stream_logs(self, name: str) -> None:
        """Follows the chief's (worker 0's) log with the SDK, which prints each line."""

        def follow():
            try:
                self.client.get_job_logs(name, namespace=self.namespace, job_kind=TFJOB_KIND,
                                         is_master=True, follow=True)
            except Exception as err:  # logs are a courtesy; the job's outcome is what counts
                self._say(f"(log stream ended: {err})")

        self._streamer = threading.Thread(target=follow, daemon=True)
        self._streamer.start()

    def _wait(self, name: str, started: float):
        seen = None
        self._streamer = None
        while True:
            conditions = self._conditions(name)
            latest = next((c for c in reversed(conditions) if c.status == "True"), None)
            if latest is not None and latest.type != seen:
                seen = latest.type
                self._say(f"TFJob {name}: {latest.type}"
                          + (f" ({latest.message})" if latest.message else ""))
                if latest.type == "Running" and self._streamer is None:
                    self._stream_logs(name)
            if latest is not None and latest.type in ("Succeeded", "Failed"):
                return latest
            if self.timeout_seconds and time.time() - started > self.timeout_seconds:
                raise TimeoutError(f"TFJob {name} did not finish in {self.timeout_seconds:.0f} s")
            time.sleep(self.poll_seconds)
