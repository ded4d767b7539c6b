"""What every preflight check shares: the row it reports (:class:`Row`), the cluster it checks
(:class:`Cluster`), and the raw API calls (a short connect timeout; 404 read as "missing")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

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


def _status(error) -> int | None:
    """The HTTP status of an API error, None for one without (no answer)."""
    return getattr(error, "status", None)


def _reason(error) -> str:
    """An API error in a few words: its HTTP status and reason, else its type and text."""
    status = _status(error)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '') or ''}".rstrip()
    return f"{type(error).__name__}: {error}"


def _message(error) -> str:
    """The API server's own words for a refused request (its Status message), else the HTTP
    status."""
    try:
        message = json.loads(getattr(error, "body", "") or "{}").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"{_reason(error)}: {message}" if message else _reason(error)


def _serves(api_client, group: str, version: str, plural: str) -> bool | None:
    """Whether discovery lists ``plural`` at ``group/version``; None when it cannot be asked."""
    try:
        listing = _call(api_client, f"/apis/{group}/{version}")
    except Exception as error:
        return False if _status(error) == 404 else None
    return plural in {resource.get("name") for resource in (listing or {}).get("resources") or []}


def _read(api_client, path: str) -> tuple[dict | None, object]:
    """``(object, None)``, ``(None, "missing")`` on a 404, or ``(None, error)``."""
    try:
        return _call(api_client, path) or {}, None
    except Exception as error:
        return None, ("missing" if _status(error) == 404 else error)


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
