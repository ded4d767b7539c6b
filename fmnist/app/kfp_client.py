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
DEFAULT_PACKAGE = "compiled/fashion_mnist_pipeline.yaml"
DEFAULT_EXPERIMENT = "fashion-mnist"
_CRON_FIELD = re.compile(r"^[\d*?/,LW#A-Z-]+$", re.IGNORECASE)


@dataclass
class Endpoint:
    host: str
    namespace: str = ""
    token_file: str = ""

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
        kwargs: dict[str, Any] = {"host": self.host, "existing_token": self.token()}
        if self.namespace:
            kwargs["namespace"] = self.namespace
        return kfp.Client(**kwargs)


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
