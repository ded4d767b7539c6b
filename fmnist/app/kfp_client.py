"""Working with a Kubeflow Pipelines endpoint through ``kfp.Client``: runs from the compiled
package, uploads of pipelines and versions, and recurring runs.

Authentication is what ``kfp.Client`` supports: the host, an existing bearer token (read from
``$KF_PIPELINES_TOKEN`` or a file, never a command-line value that shells keep in history),
and the user namespace of a multi-user deployment. Nothing here prints a token.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from fmnist.errors import UserInputError

TOKEN_ENV = "KF_PIPELINES_TOKEN"
# dsl.Collected (the fan-in of the models trained in parallel) is resolved by KFP backends from
# 2.14.0 on (kubeflow/pipelines commit ed828b5, #11725; 2.5.0 driver.go L1763-1772 skips
# ParallelFor tasks and fails with "subTaskName, ..., not in tasks").
MIN_BACKEND = (2, 14, 0)
BACKEND_FLAG = "--kfp-backend-version"
HEALTHZ_PATH = "/apis/v2beta1/healthz"  # served by every KFP 2.x API server and UI
DEFAULT_PACKAGE = "compiled/fashion_mnist_pipeline.yaml"
DEFAULT_EXPERIMENT = "fashion-mnist"
_CRON_FIELD = re.compile(r"^[\d*?/,LW#A-Z-]+$", re.IGNORECASE)


@dataclass
class Endpoint:
    host: str
    namespace: str = ""
    token_file: str = ""
    backend_version: str = ""  # what the user says the KFP backend is (skips detection)

    def validate(self) -> Endpoint:
        parsed = urllib.parse.urlparse(self.host or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UserInputError(
                f"host {self.host!r} is not a URL; give the Kubeflow Pipelines endpoint, e.g. "
                "https://kubeflow.example.com/pipeline or http://localhost:8080"
            )
        if self.token_file and not os.path.isfile(self.token_file):
            raise UserInputError(f"token file {self.token_file!r} does not exist")
        return self

    def token(self) -> str | None:
        if self.token_file:
            with open(self.token_file) as handle:
                return handle.read().strip() or None
        return os.environ.get(TOKEN_ENV) or None

    def client(self):
        import kfp

        self.validate()
        check_backend(self)
        kwargs: dict[str, Any] = {"host": self.host, "existing_token": self.token()}
        if self.namespace:
            kwargs["namespace"] = self.namespace
        return kfp.Client(**kwargs)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``2.15.0`` (or ``v2.15.0``, ``2.15.0-rc.1``) as a tuple; None for ``unknown`` and the
    like."""
    import re

    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    return (int(match[1]), int(match[2]), int(match[3] or 0)) if match else None


def _dotted(version: tuple) -> str:
    return ".".join(str(part) for part in version)


@dataclass(frozen=True)
class BackendVersion:
    """What the backend's healthz says: a version when its tag names one, else only whether it
    is at least 2.14.0 (``pipeline_store``, added in 2.14.0, commit ea20731060)."""

    version: tuple | None
    at_least_minimum: bool
    evidence: str


def read_backend_version(endpoint: Endpoint, timeout: float = 30.0) -> BackendVersion:
    """A raw GET of the API server's healthz, directly or through the Kubeflow UI.

    The kfp SDK's ``get_kfp_healthz`` drops ``tag_name`` (not in the healthz proto:
    kubeflow/pipelines 2.15.0 ``backend/api/v2beta1/healthz.proto`` L59-77), so this reads the
    JSON itself: ``tag_name``/``pipeline_store`` from the API server (2.15.0
    ``backend/src/apiserver/main.go`` L355-364), ``apiServerTagName``/``pipelineStore`` through
    ml-pipeline-ui (``frontend/server/handlers/healthz.ts`` L20-29). Released images before 2.16
    say ``tag_name: unknown`` (the release workflow passed no build args; fixed by 94841d6c85).
    """
    import httpx

    headers = {"Accept": "application/json"}
    token = endpoint.token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = endpoint.host.rstrip("/") + HEALTHZ_PATH
    try:
        response = httpx.get(url, headers=headers, timeout=timeout)
        body = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as error:
        response, body = None, f"{type(error).__name__}: {error}"
    if not isinstance(body, dict):
        got = body if isinstance(body, str) else (
            f"HTTP {response.status_code} {response.headers.get('content-type', '')}")
        raise UserInputError(
            f"cannot read the Kubeflow Pipelines backend's version at {url} ({got}; a login "
            f"page? check --host and the token); if you know it, pass {BACKEND_FLAG} "
            "(e.g. 2.15.0)")
    tag = str(body.get("tag_name", body.get("apiServerTagName", "")) or "")
    store = body.get("pipeline_store", body.get("pipelineStore"))
    version = parse_version(tag)
    if version:
        return BackendVersion(version, version >= MIN_BACKEND, f"healthz tag {tag}")
    if store is not None:
        return BackendVersion(None, True, f"healthz has pipeline_store ({store}): 2.14.0 or "
                                          f"newer (tag {tag or 'empty'})")
    return BackendVersion(None, False, f"healthz has no pipeline_store and tag "
                                       f"{tag or 'empty'}")


def check_backend(endpoint: Endpoint) -> str:
    """Refuses a KFP backend that cannot run the compiled pipeline, naming the minimum;
    returns what was found. ``endpoint.backend_version`` overrides the detection."""
    minimum = _dotted(MIN_BACKEND)
    advice = (f"this pipeline needs KFP {minimum} or newer (dsl.Collected); Kubeflow 1.10 ships "
              "KFP 2.4.1/2.5.0, Kubeflow 1.11 ships 2.15.0: upgrade the backend")
    if endpoint.backend_version:
        declared = parse_version(endpoint.backend_version)
        if declared is None:
            raise UserInputError(f"{BACKEND_FLAG} {endpoint.backend_version!r} is not a version; "
                                 "give e.g. 2.15.0")
        if declared < MIN_BACKEND:
            raise UserInputError(f"the KFP backend is {_dotted(declared)} ({BACKEND_FLAG}): "
                                 f"{advice}")
        return f"{_dotted(declared)} (given with {BACKEND_FLAG})"
    found = read_backend_version(endpoint)
    if not found.at_least_minimum:
        what = _dotted(found.version) if found.version else f"older than {minimum}"
        raise UserInputError(f"the KFP backend at {endpoint.host} is {what} ({found.evidence}): "
                             f"{advice}; if it is in fact newer, say so with {BACKEND_FLAG}")
    return _dotted(found.version) if found.version else found.evidence


def cron_expression(text: str) -> str:
    """KFP schedules take robfig/cron's six fields (seconds first); five standard fields are
    accepted and get ``0`` seconds. Anything else is rejected with the expected shape."""
    fields = (text or "").split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6 or not all(_CRON_FIELD.match(f) for f in fields):
        raise UserInputError(
            f"cron {text!r} is malformed; use five fields 'minute hour day month weekday' "
            "(e.g. '0 3 * * *' for 03:00 daily) or six with seconds first"
        )
    return " ".join(fields)


def _package(path: str) -> str:
    if not os.path.isfile(path):
        raise UserInputError(f"pipeline package {path!r} not found; run `make compile` first")
    return path


def submit_run(
    endpoint: Endpoint,
    arguments: dict[str, Any],
    *,
    package: str = DEFAULT_PACKAGE,
    experiment: str = DEFAULT_EXPERIMENT,
    run_name: str | None = None,
    wait: bool = False,
    timeout_seconds: int = 6 * 3600,
) -> dict[str, Any]:
    """Creates a run from the compiled package in ``experiment``; optionally waits for it."""
    client = endpoint.client()
    result = client.create_run_from_pipeline_package(
        _package(package), arguments=arguments, run_name=run_name,
        experiment_name=experiment, namespace=endpoint.namespace or None,
    )
    outcome = {"run_id": result.run_id, "experiment": experiment}
    if wait:
        run = client.wait_for_run_completion(result.run_id, timeout=timeout_seconds)
        outcome["state"] = str(run.state)
        if outcome["state"] not in ("SUCCEEDED",):
            raise UserInputError(f"run {result.run_id} ended {outcome['state']}")
    return outcome


def upload(endpoint: Endpoint, name: str, *, version: str, package: str = DEFAULT_PACKAGE,
           description: str = "") -> dict[str, Any]:
    """Uploads the package as a new pipeline, or as a new version of an existing one."""
    client = endpoint.client()
    pipeline_id = client.get_pipeline_id(name)
    if pipeline_id is None:
        pipeline = client.upload_pipeline(_package(package), pipeline_name=name,
                                          description=description or None,
                                          namespace=endpoint.namespace or None)
        pipeline_id = pipeline.pipeline_id
        versions = client.list_pipeline_versions(pipeline_id).pipeline_versions or []
        return {"pipeline_id": pipeline_id, "created": True,
                "version_id": versions[0].pipeline_version_id if versions else None}
    created = client.upload_pipeline_version(_package(package), pipeline_version_name=version,
                                             pipeline_id=pipeline_id,
                                             description=description or None)
    return {"pipeline_id": pipeline_id, "created": False,
            "version_id": created.pipeline_version_id}


def schedule(
    endpoint: Endpoint,
    name: str,
    cron: str,
    arguments: dict[str, Any],
    *,
    package: str = DEFAULT_PACKAGE,
    experiment: str = DEFAULT_EXPERIMENT,
    max_concurrency: int = 1,
    catchup: bool = False,
) -> dict[str, Any]:
    """Creates a recurring run; catch-up of missed runs is off unless asked for."""
    expression = cron_expression(cron)
    if max_concurrency < 1:
        raise UserInputError(f"max concurrency must be at least 1, got {max_concurrency}")
    client = endpoint.client()
    experiment_id = client.create_experiment(
        experiment, namespace=endpoint.namespace or None
    ).experiment_id
    recurring = client.create_recurring_run(
        experiment_id=experiment_id, job_name=name, cron_expression=expression,
        max_concurrency=max_concurrency, no_catchup=not catchup, params=arguments,
        pipeline_package_path=_package(package),
    )
    return {"recurring_run_id": recurring.recurring_run_id, "cron": expression}


def list_schedules(endpoint: Endpoint, experiment: str = DEFAULT_EXPERIMENT) -> list[dict]:
    client = endpoint.client()
    experiment_id = client.get_experiment(
        experiment_name=experiment, namespace=endpoint.namespace or None
    ).experiment_id
    response = client.list_recurring_runs(experiment_id=experiment_id, page_size=100)
    return [
        {"id": r.recurring_run_id, "name": r.display_name, "status": str(r.status),
         "cron": r.trigger.cron_schedule.cron if r.trigger and r.trigger.cron_schedule else None}
        for r in (response.recurring_runs or [])
    ]


def disable_schedule(endpoint: Endpoint, recurring_run_id: str) -> None:
    endpoint.client().disable_recurring_run(recurring_run_id)
