"""Which training operator runs a training job on this cluster: the Training Operator v1's
TFJob or Kubeflow Trainer v2's TrainJob (``kubernetes.operator``), decided at run time from
what the API server serves.

* ``tfjob``: the API server serves ``kubeflow.org/v1`` ``tfjobs`` (the Training Operator v1).
* ``trainjob``: it serves ``trainer.kubeflow.org/v1alpha1`` ``trainjobs`` (Trainer v2), and the
  ClusterTrainingRuntime ``fmnist-tensorflow`` exists (Trainer's webhook refuses a TrainJob
  whose runtime is missing: kubeflow/trainer v2.1.0 pkg/runtime/core/clustertrainingruntime.go
  lines 84-93).
* ``auto``: ``tfjob`` where it is served, else ``trainjob``; neither is an error naming both
  installs.

Whether the runtime exists cannot always be told. On Kubeflow 26.03 every authenticated user
may read ClusterTrainingRuntimes: the ClusterRoleBinding
``kubeflow-trainer-view-cluster-runtimes`` binds them to the group ``system:authenticated``
(kubeflow/manifests 26.03
applications/trainer/upstream/overlays/kubeflow-platform/kubeflow-trainer-roles.yaml lines
83-94). ``kubeflow-edit``'s rule for them (kubeflow/trainer v2.1.0 the same file, lines 21-30)
grants nothing there, since a profile binds it in its namespace with a RoleBinding, which
grants nothing on cluster-scoped objects. Elsewhere (standalone KFP, Kubeflow 1.11) the read
may be refused; a refused read leaves the answer to the webhook at create time.

A TrainJob's pod settings take one of two shapes (:mod:`fmnist_kfp.kubernetes.trainjob`),
told apart by the fields of the TrainJob schema the API server publishes
(:func:`trainjob_api`): ``/openapi/v3`` is readable by every authenticated user (the
``system:discovery`` ClusterRole).

A job the chosen operator is to run is a :class:`ClusterJob`, checked once as it is made
against what that operator can do; the TFJob and TrainJob builders then only build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.api_errors import api_status
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.tfjob import build_tfjob, tfjob_problems
from fmnist_kfp.kubernetes.trainjob import (
    API_VERSION,
    GROUP,
    KIND,
    OVERRIDES,
    PATCHES,
    PLURAL,
    RUNTIME_APPLY,
    RUNTIME_NAME,
    RUNTIME_PLURAL,
    SHAPES,
    VERSION,
    build_trainjob,
    trainjob_problems,
)
from fmnist_kfp.settings.jobs import OPERATORS, KubernetesSettings
from fmnist_kfp.training.training_job import TrainingJobSpec

TFJOB_API = ("kubeflow.org/v1", "tfjobs")
TRAINJOB_API = (API_VERSION, PLURAL)
TRAINING_OPERATOR_INSTALL = (
    "install the Training Operator v1 (kubeflow/manifests "
    "applications/training-operator/upstream/overlays/kubeflow)")
TRAINER_INSTALL = "install Kubeflow Trainer v2 (2.1 or later, as Kubeflow 26.03 ships it)"


class Discovery(Protocol):
    """What :func:`choose_operator` asks the API server."""

    def serves(self, group_version: str, plural: str) -> bool:
        """Whether ``GET /apis/<group_version>`` lists ``plural``."""

    def runtime_exists(self, name: str) -> bool | None:
        """Whether the ClusterTrainingRuntime ``name`` exists; None when it cannot be read."""

    def trainjob_fields(self) -> set[str] | None:
        """The fields of the served TrainJob's ``spec``; None when the schema cannot be read."""


class ClusterDiscovery:
    """:class:`Discovery` through a ``kubernetes`` ``ApiClient`` (default: in-cluster, else the
    kubeconfig)."""

    def __init__(self, api_client=None, request_timeout: float = 30.0):
        self._api_client = api_client
        self.request_timeout = request_timeout

    @property
    def api_client(self):
        if self._api_client is None:
            from fmnist_kfp.kubernetes.runner import default_api_client

            self._api_client = default_api_client()
        return self._api_client

    def _get(self, path: str) -> Any:
        return self.api_client.call_api(
            path, "GET", header_params={"Accept": "application/json"},
            response_type="object", auth_settings=["BearerToken"],
            _return_http_data_only=True, _preload_content=True,
            _request_timeout=self.request_timeout)

    def serves(self, group_version: str, plural: str) -> bool:
        try:
            listed = self._get(f"/apis/{group_version}")
        except Exception as error:
            if api_status(error) == 404:  # the group/version is not served
                return False
            raise
        return any(r.get("name") == plural for r in (listed or {}).get("resources") or [])

    def runtime_exists(self, name: str) -> bool | None:
        from kubernetes import client

        try:
            client.CustomObjectsApi(self.api_client).get_cluster_custom_object(
                GROUP, VERSION, RUNTIME_PLURAL, name, _request_timeout=self.request_timeout)
        except Exception as error:
            status = api_status(error)
            if status == 404:
                return False
            if status in (401, 403):
                return None
            raise
        return True

    def trainjob_fields(self) -> set[str] | None:
        try:
            index = self._get("/openapi/v3")
            entry = (index.get("paths") or {}).get(f"apis/{API_VERSION}") or {}
            document = self._get(entry.get("serverRelativeURL") or f"/openapi/v3/apis/"
                                 f"{API_VERSION}")
        except Exception as error:
            if api_status(error) in (401, 403, 404):
                return None
            raise
        return spec_fields(document, GROUP, VERSION, KIND)


def spec_fields(document: dict, group: str, version: str, kind: str) -> set[str] | None:
    """The ``spec`` properties of ``kind`` in an OpenAPI v3 document of the API server (the
    schema carrying ``x-kubernetes-group-version-kind`` of that group, version and kind)."""
    schemas = (document.get("components") or {}).get("schemas") or {}

    def resolve(schema: dict) -> dict:
        ref = schema.get("$ref") or next(
            (s.get("$ref") for s in schema.get("allOf") or [] if "$ref" in s), None)
        if ref:
            return schemas.get(ref.rsplit("/", 1)[-1], {})
        return schema

    for schema in schemas.values():
        if any(gvk.get("group") == group and gvk.get("version") == version
               and gvk.get("kind") == kind
               for gvk in schema.get("x-kubernetes-group-version-kind") or []):
            spec = resolve((schema.get("properties") or {}).get("spec") or {})
            return set(spec.get("properties") or {})
    return None


def trainjob_api(discovery: Discovery) -> str:
    """The shape of a TrainJob's pod settings this cluster takes: ``runtimePatches`` where its
    Trainer serves them (2.2 and later), else ``podTemplateOverrides`` (Trainer 2.1, Kubeflow
    26.03's, also assumed when the schema cannot be read)."""
    fields = discovery.trainjob_fields()
    if fields and PATCHES in fields:
        return PATCHES
    return OVERRIDES


def _trainjob_ready(discovery: Discovery, asked: str) -> None:
    """Raises :class:`UserInputError` unless TrainJobs can run: Trainer v2 serves them and our
    runtime exists (or cannot be seen)."""
    if not discovery.serves(*TRAINJOB_API):
        raise UserInputError(
            f"kubernetes.operator {asked}: this cluster serves neither "
            + ("" if asked == "trainjob" else "kubeflow.org/v1 tfjobs (the Training Operator "
               "v1) nor ")
            + f"{API_VERSION} {PLURAL} (Kubeflow Trainer v2): {TRAINER_INSTALL} and "
            f"`{RUNTIME_APPLY}`"
            + ("" if asked == "trainjob" else f", or {TRAINING_OPERATOR_INSTALL}"))
    if discovery.runtime_exists(RUNTIME_NAME) is False:
        raise UserInputError(
            f"kubernetes.operator {asked}: Kubeflow Trainer v2 is installed, but its "
            f"ClusterTrainingRuntime {RUNTIME_NAME} is not: `{RUNTIME_APPLY}` (once per "
            "cluster)" + ("" if asked == "trainjob" else
                          f", or {TRAINING_OPERATOR_INSTALL} to run TFJobs instead"))


def choose_operator(setting: str, discovery: Discovery) -> str:
    """``"tfjob"`` or ``"trainjob"`` for the ``kubernetes.operator`` ``setting`` on the cluster
    ``discovery`` asks (see the module docstring); raises :class:`UserInputError` naming what to
    install when the operator asked for, or any with ``auto``, is not there."""
    if setting not in OPERATORS:
        raise UserInputError(f"kubernetes.operator must be one of {', '.join(OPERATORS)}, got "
                             f"{setting!r}")
    if setting == "tfjob":
        if not discovery.serves(*TFJOB_API):
            raise UserInputError(
                "kubernetes.operator tfjob: this cluster does not serve kubeflow.org/v1 tfjobs "
                f"(the Training Operator v1): {TRAINING_OPERATOR_INSTALL}, or set "
                "kubernetes.operator to trainjob or auto (Kubeflow Trainer v2)")
        return "tfjob"
    if setting == "auto" and discovery.serves(*TFJOB_API):
        return "tfjob"
    _trainjob_ready(discovery, setting)
    return "trainjob"


@dataclass(frozen=True)
class ClusterJob:
    """A training job as one operator runs it: the job spec (validated as it was made), the
    pods' settings (as :func:`fmnist_kfp.settings.jobs.cluster_settings` validated them),
    the ``operator`` (``tfjob`` or ``trainjob``, as :func:`choose_operator` chose it) and a
    TrainJob's ``shape`` (:func:`trainjob_api`). Checked once, at construction, against what
    that operator can do (:func:`~fmnist_kfp.kubernetes.tfjob.tfjob_problems`,
    :func:`~fmnist_kfp.kubernetes.trainjob.trainjob_problems`), so that the builders only
    build and a launcher given one creates it unchecked again."""

    spec: TrainingJobSpec
    settings: KubernetesSettings
    operator: str = "tfjob"
    shape: str = OVERRIDES  # a TrainJob's pod settings; unused by a TFJob

    def __post_init__(self) -> None:
        if self.operator == "tfjob":
            problems = tfjob_problems(self.spec, self.settings)
            if problems:
                raise UserInputError("; ".join(problems))
            return
        if self.operator != "trainjob":
            raise ValueError(f"operator must be tfjob or trainjob, got {self.operator!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {self.shape!r}")
        problems = trainjob_problems(self.spec, self.settings, self.shape)
        if problems:
            raise UserInputError(
                "this job cannot run as a TrainJob (kubernetes.operator trainjob): "
                + "; ".join(problems))

    def manifest(self) -> dict[str, Any]:
        """The TFJob or TrainJob as the API server receives it."""
        if self.operator == "tfjob":
            return to_manifest(build_tfjob(self.spec, self.settings))
        return build_trainjob(self.spec, self.settings, self.shape)
