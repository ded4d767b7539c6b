"""Working with a Kubeflow Pipelines endpoint through ``kfp.Client``: runs, uploads of
pipelines and versions, and recurring runs, each of the pipeline compiled here for the images
asked for (into a temporary file: no checkout needed) or of a package compiled before.

Authentication is what ``kfp.Client`` supports: the host, an existing bearer token (read from
``$KF_PIPELINES_TOKEN`` or a file, never a command-line value that shells keep in history),
and the user namespace of a multi-user deployment. Nothing here prints a token.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import urllib.parse
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fmnist_kfp.errors import RemoteError, UserInputError, connection_problem
from fmnist_kfp.kubernetes.api_errors import own_status, server_words

TOKEN_ENV = "KF_PIPELINES_TOKEN"
# dsl.Collected (the fan-in of the models trained in parallel) is resolved by KFP backends from
# 2.14.0 on (kubeflow/pipelines commit ed828b5, #11725; 2.5.0 driver.go L1763-1772 skips
# ParallelFor tasks and fails with "subTaskName, ..., not in tasks").
MIN_BACKEND = (2, 14, 0)
BACKEND_FLAG = "--kfp-backend-version"
HEALTHZ_PATH = "/apis/v2beta1/healthz"  # served by every KFP 2.x API server and UI
PACKAGE_NAME = "fashion_mnist_pipeline.yaml"  # what `fmnist-kfp compile` writes in compiled/
DEFAULT_EXPERIMENT = "fashion-mnist"
_CRON_FIELD = re.compile(r"^[\d*?/,LW#A-Z-]+$", re.IGNORECASE)
# A host that cannot be reached fails in seconds: one probe of the healthz with a short connect
# timeout before kfp.Client, whose constructor retries a failed healthz 5 times, 5 s apart.
CONNECT_TIMEOUT_SECONDS = 5.0
# README.md "From Python": multi-user Kubeflow through its Istio gateway (the KFP API under
# /pipeline), standalone KFP through its UI service.
FORWARD_HINT = ("check --host: the KFP API's address, e.g. http://localhost:8080/pipeline while "
                "`kubectl port-forward -n istio-system svc/istio-ingressgateway 8080:80` runs "
                "(multi-user Kubeflow), or http://localhost:8080 while `kubectl port-forward -n "
                "kubeflow svc/ml-pipeline-ui 8080:80` runs (standalone KFP)")


@dataclass
class Endpoint:
    host: str
    namespace: str = ""
    token_file: str = ""
    backend_version: str = ""  # what the user says the KFP backend is (skips detection)

    def validate(self) -> Endpoint:
        parsed = urllib.parse.urlparse(self.host or "")
        try:
            valid = parsed.scheme in ("http", "https") and bool(parsed.hostname) and (
                parsed.port or 0) >= 0
        except ValueError:  # a port that is not a number from 0 to 65535
            valid = False
        if not valid:
            raise UserInputError(
                f"host {self.host!r} is not a URL; give the Kubeflow Pipelines endpoint, e.g. "
                "https://kubeflow.example.com/pipeline or http://localhost:8080"
            )
        if self.token_file and not os.path.isfile(self.token_file):
            raise UserInputError(f"token file {self.token_file!r} does not exist")
        return self

    def token(self) -> str | None:
        if self.token_file:
            try:
                with open(self.token_file) as handle:
                    return handle.read().strip() or None
            except (OSError, UnicodeDecodeError) as error:
                raise UserInputError(f"cannot read the token file {self.token_file!r}: "
                                     f"{error}") from None
        return os.environ.get(TOKEN_ENV) or None

    def client(self):
        import kfp

        self.validate()
        check_backend(self)
        kwargs: dict[str, Any] = {"host": self.host, "existing_token": self.token()}
        if self.namespace:
            kwargs["namespace"] = self.namespace
        with warnings.catch_warnings(), talking_to(self):
            # Its FutureWarning names the backend versions it needs; check_backend did that.
            warnings.filterwarnings("ignore", "This client only works with", FutureWarning)
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


def _healthz(endpoint: Endpoint, timeout: float):
    """The response to a GET of the healthz; ``RemoteError`` when none came."""
    import httpx

    headers = {"Accept": "application/json"}
    token = endpoint.token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = endpoint.host.rstrip("/") + HEALTHZ_PATH
    try:
        return httpx.get(url, headers=headers,
                         timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_SECONDS))
    except httpx.HTTPError as error:
        raise remote_error(endpoint, error) from None


def remote_error(endpoint: Endpoint, error: BaseException) -> RemoteError:
    """``error`` of a request to the endpoint, as a message that names what to check.

    ``error`` is read as ``kfp.Client`` raised it (``own_status``): its calls raise the
    ``ApiException`` itself, and the API server's words are its body's (``server_words``: a
    login page in front of the API shows as the start of its text)."""
    problem = connection_problem(error)
    if problem:
        return RemoteError(f"cannot reach Kubeflow Pipelines at {endpoint.host}: {problem}; "
                           f"{FORWARD_HINT}")
    status = own_status(error)
    if status is not None:  # kfp_server_api.ApiException: the API server answered
        reason = server_words(getattr(error, "body", None)) or getattr(error, "reason", "")
        hint = ("; check the token (--token-file or $KF_PIPELINES_TOKEN) and --namespace"
                if status in (401, 403) else "")
        return RemoteError(f"Kubeflow Pipelines at {endpoint.host} answered HTTP {status}: "
                           f"{reason}{hint}")
    return RemoteError(f"the request to Kubeflow Pipelines at {endpoint.host} failed: "
                       f"{type(error).__name__}: {error}")


@contextlib.contextmanager
def talking_to(endpoint: Endpoint) -> Iterator[None]:
    """Turns what ``kfp.Client`` raises when the API server is unreachable or refuses a
    request (urllib3 errors, ``ApiException``, the constructor's healthz ``TimeoutError``)
    into ``RemoteError`` naming the endpoint."""
    import urllib3
    from kfp_server_api.exceptions import ApiException

    try:
        yield
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
        raise remote_error(endpoint, error) from None


def _healthz_json(endpoint: Endpoint, timeout: float = 30.0) -> tuple[dict | None, str]:
    """The healthz's JSON object (None when the answer is not one) and what came back."""
    response = _healthz(endpoint, timeout)
    try:
        body = response.json() if response.status_code == 200 else None
    except ValueError:
        body = None
    got = f"HTTP {response.status_code} {response.headers.get('content-type', '')}".strip()
    return (body if isinstance(body, dict) else None), got


def read_backend_version(endpoint: Endpoint, timeout: float = 30.0) -> BackendVersion:
    """A raw GET of the API server's healthz, directly or through the Kubeflow UI.

    The kfp SDK's ``get_kfp_healthz`` drops ``tag_name`` (not in the healthz proto:
    kubeflow/pipelines 2.15.0 ``backend/api/v2beta1/healthz.proto`` L59-77), so this reads the
    JSON itself: ``tag_name``/``pipeline_store`` from the API server (2.15.0
    ``backend/src/apiserver/main.go`` L355-364), ``apiServerTagName``/``pipelineStore`` through
    ml-pipeline-ui (``frontend/server/handlers/healthz.ts`` L20-29). Released images before 2.16
    say ``tag_name: unknown`` (the release workflow passed no build args; fixed by 94841d6c85).
    """
    url = endpoint.host.rstrip("/") + HEALTHZ_PATH
    body, got = _healthz_json(endpoint, timeout)
    if body is None:
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
        # The version is taken on the user's word, but the API must answer: kfp.Client reads
        # the healthz too, and retries a failing one for half a minute.
        body, got = _healthz_json(endpoint)
        if body is None:
            raise UserInputError(
                f"{endpoint.host.rstrip('/')}{HEALTHZ_PATH} is not the Kubeflow Pipelines API's "
                f"healthz ({got}; a login page? check --host and the token)")
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
    """``path`` when it holds a compiled pipeline (checked before any request)."""
    import yaml

    if not os.path.isfile(path):
        raise UserInputError(f"pipeline package {path!r} not found; write it with `fmnist-kfp "
                             "compile`, or leave out --package to compile the pipeline here")
    try:
        with open(path) as handle:
            spec = next(yaml.safe_load_all(handle), None)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        spec = str(error)
    if not (isinstance(spec, dict) and "pipelineInfo" in spec and "root" in spec):
        raise UserInputError(f"pipeline package {path!r} is not a compiled pipeline (no "
                             f"pipelineInfo and root); pass the {PACKAGE_NAME} that `fmnist-kfp "
                             "compile` writes, or leave out --package to compile the pipeline "
                             "here")
    return path


@contextlib.contextmanager
def pipeline_package(package: str = "", *, image: str | None = None,
                     gpu_image: str | None = None) -> Iterator[str]:
    """The compiled pipeline to send, as a file: ``package`` when one is given (checked; its
    images were chosen when it was compiled, so an ``image`` beside it is refused), else the
    pipeline compiled now for ``image`` and ``gpu_image`` (None: ``$FMNIST_COMPONENT_IMAGE``
    and ``$FMNIST_GPU_IMAGE``, else the release's) into a temporary file, removed afterwards.
    Either way before any request."""
    if package:
        given = [flag for flag, value in (("--image", image), ("--gpu-image", gpu_image))
                 if value]
        if given:
            raise UserInputError(
                f"{' and '.join(given)} cannot change the package {package!r}: its images were "
                "fixed when it was compiled; leave out --package to compile the pipeline for "
                f"{' and '.join(given)}, or leave out {' and '.join(given)}")
        yield _package(package)
        return
    from fmnist_kfp.pipelines.compile import compile_pipeline

    try:
        temporary = tempfile.TemporaryDirectory(prefix="fmnist-kfp-")
    except OSError as error:  # no writable temporary directory
        raise UserInputError(f"cannot compile the pipeline into a temporary file ({error}); "
                             "set $TMPDIR to a writable directory, or pass --package") from None
    with temporary as directory:
        yield compile_pipeline(os.path.join(directory, PACKAGE_NAME), image=image,
                               gpu_image=gpu_image)


def submit_run(
    endpoint: Endpoint,
    arguments: dict[str, Any],
    *,
    package: str = "",
    image: str | None = None,
    gpu_image: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    run_name: str | None = None,
    wait: bool = False,
    timeout_seconds: int = 6 * 3600,
) -> dict[str, Any]:
    """Creates a run in ``experiment`` of the pipeline compiled for ``image``/``gpu_image``
    (or of ``package``: :func:`pipeline_package`); optionally waits for it."""
    with pipeline_package(package, image=image, gpu_image=gpu_image) as path:
        client = endpoint.client()
        with talking_to(endpoint):
            result = client.create_run_from_pipeline_package(
                path, arguments=arguments, run_name=run_name,
                experiment_name=experiment, namespace=endpoint.namespace or None,
            )
    outcome = {"run_id": result.run_id, "experiment": experiment}
    if wait:
        with talking_to(endpoint):
            try:
                run = client.wait_for_run_completion(result.run_id, timeout=timeout_seconds)
            except TimeoutError:
                raise RemoteError(f"run {result.run_id} did not finish within "
                                  f"{timeout_seconds} s; it goes on in Kubeflow") from None
        outcome["state"] = str(run.state)
        if outcome["state"] not in ("SUCCEEDED",):
            raise UserInputError(f"run {result.run_id} ended {outcome['state']}")
    return outcome


def find_pipeline(client, name: str, namespace: str = "") -> str | None:
    """The id of the pipeline displayed as ``name`` where ``upload`` puts it: private to
    ``namespace`` when one is given, else (or when that has none) among shared pipelines.

    ``kfp.Client.get_pipeline_id`` lists without a namespace, which multi-user KFP answers with
    shared pipelines only: ``ListPipelines`` selects ``Namespace = <the request's>``
    (kubeflow/pipelines 2.15.0 and 2.16.0 ``backend/src/apiserver/server/pipeline_server.go``
    L401-416, ``storage/pipeline_store.go`` L298-312). Single-user KFP ignores the namespace
    (``resource_manager.go`` L2017-2023), so the first list finds every pipeline there."""
    import json

    query = json.dumps({"predicates": [
        {"operation": "EQUALS", "key": "display_name", "stringValue": name}]})
    for scope in dict.fromkeys([namespace or None, None]):
        found = client.list_pipelines(filter=query, namespace=scope,
                                      page_size=2).pipelines or []
        if len(found) > 1:
            where = f"namespace {scope}" if scope else "the shared pipelines"
            raise UserInputError(f"{len(found)} pipelines are named {name!r} in {where}; "
                                 "pass --name with a name only one of them has")
        if found:
            return found[0].pipeline_id
    return None


def _conflict(error: BaseException) -> bool:
    return own_status(error) == 409


def upload(endpoint: Endpoint, name: str, *, version: str, package: str = "",
           image: str | None = None, gpu_image: str | None = None,
           description: str = "") -> dict[str, Any]:
    """Uploads the pipeline compiled for ``image``/``gpu_image`` (or ``package``:
    :func:`pipeline_package`) as a new pipeline, or as a new version of an existing one.

    With a namespace (multi-user Kubeflow) the pipeline is created private to it (KFP's
    unique index is (Name, Namespace): 2.15.0 ``backend/src/apiserver/model/pipeline.go``
    L44, L54); an existing one is looked up there first, then among shared pipelines."""
    with pipeline_package(package, image=image, gpu_image=gpu_image) as path:
        return _upload(endpoint, name, path, version=version, description=description)


def _upload(endpoint: Endpoint, name: str, path: str, *, version: str,
            description: str) -> dict[str, Any]:
    from kfp_server_api.exceptions import ApiException

    client = endpoint.client()
    where = f"namespace {endpoint.namespace}" if endpoint.namespace else "shared pipelines"
    with talking_to(endpoint):
        pipeline_id = find_pipeline(client, name, endpoint.namespace)
        if pipeline_id is None:
            try:
                pipeline = client.upload_pipeline(path, pipeline_name=name,
                                                  description=description or None,
                                                  namespace=endpoint.namespace or None)
            except ApiException as error:
                if not _conflict(error):
                    raise
                # The index holds the pipeline's name; the lookup matches display names.
                raise UserInputError(
                    f"Kubeflow Pipelines already has a pipeline named {name!r} in {where}, "
                    "but none displayed under that name; pass --name with another name, or "
                    "rename it in the Kubeflow UI") from None
            pipeline_id = pipeline.pipeline_id
            versions = client.list_pipeline_versions(pipeline_id).pipeline_versions or []
            return {"pipeline_id": pipeline_id, "created": True,
                    "version_id": versions[0].pipeline_version_id if versions else None}
        try:
            created = client.upload_pipeline_version(path, pipeline_version_name=version,
                                                     pipeline_id=pipeline_id,
                                                     description=description or None)
        except ApiException as error:
            if not _conflict(error):
                raise
            # Version names are unique per pipeline (model/pipeline_version.go L37, L46).
            raise UserInputError(
                f"version {version!r} of pipeline {name!r} already exists; pass --version "
                "with a new version name") from None
    return {"pipeline_id": pipeline_id, "created": False,
            "version_id": created.pipeline_version_id}


@dataclass(frozen=True)
class Recurrence:
    """When a recurring run starts: its ``cron`` (five or six fields, :func:`cron_expression`),
    how many of its runs may run at once, and whether runs missed while it was paused are
    caught up (off unless asked for). Checked as it is made, before any call."""

    cron: str
    max_concurrency: int = 1
    catchup: bool = False

    def __post_init__(self) -> None:
        cron_expression(self.cron)
        if self.max_concurrency < 1:
            raise UserInputError(
                f"max concurrency must be at least 1, got {self.max_concurrency}")

    @property
    def expression(self) -> str:
        """The six-field expression KFP takes."""
        return cron_expression(self.cron)


def schedule(
    endpoint: Endpoint,
    name: str,
    recurrence: Recurrence,
    arguments: dict[str, Any],
    *,
    package: str = "",
    image: str | None = None,
    gpu_image: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> dict[str, Any]:
    """Creates a recurring run of the pipeline compiled for ``image``/``gpu_image`` (or of
    ``package``: :func:`pipeline_package`), started as ``recurrence`` says."""
    expression = recurrence.expression
    with pipeline_package(package, image=image, gpu_image=gpu_image) as path:
        client = endpoint.client()
        with talking_to(endpoint):
            experiment_id = client.create_experiment(
                experiment, namespace=endpoint.namespace or None
            ).experiment_id
            recurring = client.create_recurring_run(
                experiment_id=experiment_id, job_name=name, cron_expression=expression,
                max_concurrency=recurrence.max_concurrency, no_catchup=not recurrence.catchup,
                params=arguments,
                pipeline_package_path=path,
            )
    return {"recurring_run_id": recurring.recurring_run_id, "cron": expression}


def list_schedules(endpoint: Endpoint, experiment: str = DEFAULT_EXPERIMENT) -> list[dict]:
    client = endpoint.client()
    with talking_to(endpoint):
        try:
            experiment_id = client.get_experiment(
                experiment_name=experiment, namespace=endpoint.namespace or None
            ).experiment_id
        except ValueError:  # kfp.Client: "No experiment is found with name ..."
            raise UserInputError(
                f"no experiment {experiment!r} at {endpoint.host}; pass the one the schedules "
                "were created in with --experiment") from None
        response = client.list_recurring_runs(experiment_id=experiment_id, page_size=100)
    return [
        {"id": r.recurring_run_id, "name": r.display_name, "status": str(r.status),
         "cron": r.trigger.cron_schedule.cron if r.trigger and r.trigger.cron_schedule else None}
        for r in (response.recurring_runs or [])
    ]


def disable_schedule(endpoint: Endpoint, recurring_run_id: str) -> None:
    client = endpoint.client()
    with talking_to(endpoint):
        client.disable_recurring_run(recurring_run_id)
