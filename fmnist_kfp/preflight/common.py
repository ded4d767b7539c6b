"""What every preflight check shares: the row it reports (:class:`Row`), the cluster it checks
(:class:`Cluster`), and the raw API calls (a short connect timeout; 404 read as "missing").

Errors are read by :mod:`fmnist_kfp.kubernetes.api_errors` as the client raised them
(``own_status``, ``status_line``, ``refusal_message``): preflight calls the ``kubernetes``
client itself, so nothing wraps them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from fmnist_kfp.kubernetes.api_errors import own_status
from fmnist_kfp.settings.scheduling import SchedulingSettings

SETUP = "manifests/"
# An API server that does not answer costs seconds: a 5 s connect timeout, one retry.
CONNECT_TIMEOUT_SECONDS = 5.0
RETRIES = 1


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


def _serves(api_client, group: str, version: str, plural: str) -> bool | None:
    """Whether discovery lists ``plural`` at ``group/version``; None when it cannot be asked."""
    try:
        listing = _call(api_client, f"/apis/{group}/{version}")
    except Exception as error:
        return False if own_status(error) == 404 else None
    return plural in {resource.get("name") for resource in (listing or {}).get("resources") or []}


def _read(api_client, path: str) -> tuple[dict | None, object]:
    """``(object, None)``, ``(None, "missing")`` on a 404, or ``(None, error)``."""
    try:
        return _call(api_client, path) or {}, None
    except Exception as error:
        return None, ("missing" if own_status(error) == 404 else error)


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
