"""What every preflight check shares: the row it reports (:class:`Row`), the cluster it checks
(:class:`Cluster`), and the raw API calls (a short connect timeout; 404 read as "missing").

Errors are read by :mod:`fmnist_kfp.kubernetes.api_errors` as the client raised them
(``own_status``, ``status_line``, ``refusal_message``): preflight calls the ``kubernetes``
client itself, so nothing wraps them.

What the run creates is judged by the cluster itself, never by a hand-made stand-in of it: the
objects the package's builders make from the run's settings (:func:`run_settings`,
:func:`run_job_spec`) are sent as server-side dry runs (:func:`_dry_run`: ``dryRun=All``, so
the CRD's schema and every admission webhook with ``sideEffects: None`` judge them, and nothing
is stored)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from fmnist_kfp.kubernetes.api_errors import own_status, read_body
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.scheduling import SchedulingSettings

SETUP = "manifests/"
# An API server that does not answer costs seconds: a 5 s connect timeout, one retry.
CONNECT_TIMEOUT_SECONDS = 5.0
RETRIES = 1
# The dry-run objects' names: ours, and new each time (a dry-run create of a name that exists
# is a 409, as a real create's).
PROBE_PREFIX = "fmnist-preflight"


@dataclass
class Row:
    """One check: ``ok`` True (fine), False (a miss: not ready) or None (information)."""

    check: str
    ok: bool | None
    found: str
    fix: str = ""


@dataclass
class Cluster:
    """Where the pipeline runs and what it is compiled against. ``operator``: the run's
    ``kubernetes.operator`` (``auto``, ``tfjob`` or ``trainjob``)."""

    namespace: str
    runner_service_account: str
    pvc: str
    credentials_secret: str
    serving_namespace: str
    serving_service_account: str
    multi_user: bool
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    operator: str = "auto"


def _call(api_client, path: str, method: str = "GET", body=None, headers=None):
    """An API request with the preflight's timeouts; the answer as plain JSON."""
    return api_client.call_api(path, method, body=body, header_params=headers or {},
                               response_type="object", auth_settings=["BearerToken"],
                               _return_http_data_only=True, _preload_content=True,
                               _request_timeout=(CONNECT_TIMEOUT_SECONDS, 30))


def _dry_run(api_client, path: str, manifest: dict) -> dict:
    """``manifest`` POSTed to the collection ``path`` as a server-side dry run (``dryRun=All``:
    admission runs, mutating and validating webhooks included, nothing is stored; kubernetes
    v1.34.1 staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go) with strict field
    validation, so that a field the served CRD lacks, which a create would drop silently, is an
    error; the object as it would have been stored. Raises the client's ``ApiException``."""
    return api_client.call_api(path, "POST", body=manifest,
                               query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
                               header_params={"Content-Type": "application/json"},
                               response_type="object", auth_settings=["BearerToken"],
                               _return_http_data_only=True, _preload_content=True,
                               _request_timeout=(CONNECT_TIMEOUT_SECONDS, 30))


def _dry_run_outcome(error) -> str:
    """How a refused dry run reads: ``"forbidden"`` (RBAC's 403 to the caller, not about the
    object), ``"refused"`` (the server judged the object: its schema, a webhook's denial, which
    controller-runtime answers with a 403 saying ``admission webhook ... denied the request``,
    or a missing namespace) or ``"unknown"`` (no answer, a 5xx such as a webhook that cannot be
    called, a 401 or 429: nothing said of the object)."""
    status = own_status(error)
    message = read_body(getattr(error, "body", None)).field("message")
    if status == 403 and "admission webhook" not in message:
        return "forbidden"
    if status in (400, 403, 404, 409, 422):
        return "refused"
    return "unknown"


def probe_name() -> str:
    """A new name for a dry-run object: ``fmnist-preflight-<6 hex digits>``."""
    return f"{PROBE_PREFIX}-{secrets.token_hex(3)}"


def run_settings(cluster: Cluster, *, gang: bool = True) -> KubernetesSettings:
    """The pod settings the run's steps would give their jobs here: the settings' defaults,
    with the run's namespace, its claim at the steps' mount path, its ``kubernetes.operator``
    and ``kubernetes.scheduling`` (without ``gang`` when ``gang`` is False), and the image it is
    compiled for (``$FMNIST_COMPONENT_IMAGE``, else the release image: ``component_image``).
    Raises :class:`fmnist_kfp.errors.UserInputError` for settings a run would refuse."""
    from fmnist_kfp.settings.platform import MOUNT_PATH, component_image

    scheduling = cluster.scheduling.changed()
    if not gang:
        scheduling = {key: value for key, value in scheduling.items()
                      if not key.startswith("gang")}
    return KubernetesSettings(image=component_image(), namespace=cluster.namespace,
                              pvc_name=cluster.pvc, mount_path=MOUNT_PATH,
                              operator=cluster.operator, scheduling=scheduling).validate()


def run_job_spec(name: str, settings: KubernetesSettings):
    """The training job the train step would run with the settings' defaults (one worker, the
    default model), its files on the claim where the step puts them."""
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    shared = settings.mount_path.rstrip("/")
    return TrainingJobSpec(name=name, config=TrainingConfig(), data_dir=f"{shared}/dataset",
                           export_dir=f"{shared}/jobs/{name}/1", work_dir=f"{shared}/jobs/{name}")


def _serves(api_client, group: str, version: str, plural: str) -> bool | None:
    """Whether discovery lists ``plural`` at ``group/version``; None when it cannot be asked."""
    try:
        listing = _call(api_client, f"/apis/{group}/{version}")
    except Exception as error:
        return False if own_status(error) == 404 else None
    return plural in {resource.get("name") for resource in (listing or {}).get("resources") or []}


def _read(api_client, path: str) -> tuple[dict, Exception | Literal["missing"] | None]:
    """``(object, None)``, ``({}, "missing")`` on a 404, or ``({}, error)``."""
    try:
        return _call(api_client, path) or {}, None
    except Exception as error:
        return {}, ("missing" if own_status(error) == 404 else error)


def _condition(obj: dict, kind: str) -> dict | None:
    """The condition of type ``kind`` in ``obj``'s status, None when it has none."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), None)


def _time(value) -> datetime | None:
    """An API timestamp (RFC 3339 text, or the client's datetime) as an aware datetime."""
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    try:  # Python 3.10's fromisoformat takes no "Z"
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _utc(moment: datetime) -> str:
    """``moment`` as the table prints times: UTC, to the second."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
