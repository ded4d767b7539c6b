"""A stand-in for the Kubeflow Pipelines REST API (v2beta1): it records what ``kfp.Client``
sends, answers with the smallest valid replies, and rejects (HTTP 400, as the API server's
``InvalidInputError``) the run and recurring-run requests the real API server rejects. It runs
nothing.

What it checks, each from kubeflow/pipelines at tag 2.15.0 (Kubeflow 1.11; the same code is in
2.4.1 and 2.5.0, Kubeflow 1.10, at the lines noted):

- ``backend/api/v2beta1/run.proto:126-203`` (``Run``) and ``recurring_run.proto:81-157``
  (``RecurringRun``): the fields a create request may carry; ``pipeline_source`` is a
  ``oneof`` of ``pipeline_spec`` (a ``Struct``) and ``pipeline_version_reference``;
  ``runtime_config.proto:23-33``: ``parameters`` is a map of ``google.protobuf.Value``.
- ``backend/src/apiserver/server/run_server.go:137-141`` and ``job_server.go:97-101``: an
  empty ``display_name`` is rejected.
- ``backend/src/apiserver/server/api_converter.go:951-954``: a missing ``runtime_config`` is
  rejected; ``:1970-1977`` (2.4.1 ``:1916-1923``): ``max_concurrency`` must be 1-10 and a cron
  must parse with ``github.com/robfig/cron`` v1.2.0 (``go.mod:41``), whose ``Parse`` takes
  5 or 6 fields, **seconds first**, or a ``@`` descriptor (robfig/cron v1.2.0
  ``parser.go:174-185``); ``:2030-2043``: a recurring run whose ``mode`` is not ``ENABLE`` is
  created disabled (we require ``ENABLE``: our examples mean to schedule).
- ``backend/src/apiserver/resource/resource_manager.go:1505-1529``: a request needs a pipeline
  spec or a reference to an uploaded version.
- ``backend/src/apiserver/template/v2_template.go:384-463`` (``validatePipelineJobInputs``,
  called for runs at ``:319`` and recurring runs at ``:108``; 2.4.1 ``:352``, 2.5.0 ``:358``):
  every parameter sent must be an input of the pipeline's root, of the declared type (number,
  string, bool, list, struct), and a required input without a default must be sent.
- ``GetValidExperimentNamespacePair`` (``run_server.go:142``): an ``experiment_id`` that is
  given must exist.

Pipelines are scoped by namespace as the API server scopes them (the same code and lines at
2.15.0, Kubeflow 1.11, and 2.16.0):

- ``backend/src/apiserver/resource/resource_manager.go:2017-2023`` (``ReplaceNamespace``): in
  single-user mode every namespace a request names becomes ``""``; in multi-user mode it is
  kept (``multi_user``, which defaults to what the healthz says).
- ``server/pipeline_server.go:401-416`` and ``storage/pipeline_store.go:298-312``
  (``ListPipelines``): the list is ``WHERE Namespace = <the request's namespace>``, so in
  multi-user mode a list without a namespace returns only the shared pipelines, and a list in
  a namespace only that namespace's (private) ones.
- ``model/pipeline.go:44,54``: a unique index ``namespace_name`` on (Name, Namespace);
  ``server/pipeline_upload_server.go:117-178``: an upload takes the ``namespace`` query
  parameter (through ``ReplaceNamespace``), the pipeline's Name from ``name`` (its display
  name too when none is given), and answers HTTP 409 when the index refuses it
  (``storage/pipeline_store.go:607-613``), with the body of ``writeErrorToResponse``
  (``:388-397``: ``error_message``, ``error_details``).
- ``model/pipeline_version.go:37,46``: a unique index ``idx_pipelineid_name`` on (PipelineId,
  Name) of versions; ``pipeline_upload_server.go:230-312``: ``upload_version`` answers 400 for
  a pipeline that does not exist (``FetchNamespaceFromPipelineId``, :272) and 409 for a
  version name the pipeline already has.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import urllib.parse

import yaml

from tests.standins.loopback import JsonRequestHandler, LoopbackServer, reply_json

API = "/apis/v2beta1"
# The JSON kind each ParameterType takes (v2_template.go:418-450).
_KINDS = {
    "NUMBER_INTEGER": (int, float), "NUMBER_DOUBLE": (int, float), "STRING": (str,),
    "BOOLEAN": (bool,), "LIST": (list,), "STRUCT": (dict,),
}


def pipeline_spec_of(document: dict) -> dict:
    """The PipelineSpec of a request's ``pipeline_spec``, which ``kfp.Client`` sends bare or
    as ``{"pipeline_spec": ..., "platform_spec": ...}`` when the pipeline has platform config
    (kfp ``client/client.py`` ``_PipelineDoc.to_dict``)."""
    return document.get("pipeline_spec", document) if "root" not in document else document


def input_problems(spec: dict, parameters: dict) -> list[str]:
    """``validatePipelineJobInputs``: the sent parameters against the root's inputs."""
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    problems = []
    for name, definition in declared.items():
        if name not in parameters:
            if not definition.get("isOptional") and "defaultValue" not in definition:
                problems.append(f"parameter {name} is not optional, yet has neither default "
                                "value nor user provided value")
            continue
        kind = definition.get("parameterType")
        value = parameters[name]
        expected = _KINDS.get(kind)
        if expected is None or not isinstance(value, expected) or (
                kind.startswith("NUMBER") and isinstance(value, bool)):
            problems.append(f"input parameter {name} requires type {kind}, but the parameter "
                            f"value {value!r} is not of that value type")
    extra = sorted(set(parameters) - set(declared))
    if extra:
        problems.append("parameter(s) provided are not required by pipeline: " + ", ".join(extra))
    return problems


def cron_problem(cron: str) -> str | None:
    """robfig/cron v1.2.0 ``Parse``: a descriptor, or 5-6 fields with seconds first."""
    if cron.startswith("@") or len(cron.split()) in (5, 6):
        return None
    return f"Schedule cron is not a supported format: {cron!r} (Expected 5 to 6 fields)"


# What KFP 2.15.0's API server answers on /apis/v2beta1/healthz (kubeflow/pipelines 2.15.0
# backend/src/apiserver/main.go L362-364; released images say tag_name "unknown" before 2.16).
HEALTHZ_2_15 = {"commit_sha": "unknown", "tag_name": "unknown", "multi_user": False,
                "pipeline_store": "database"}


class KfpStandIn(LoopbackServer):
    def __init__(self, healthz: dict | None = None, multi_user: bool | None = None):
        self.healthz = HEALTHZ_2_15 if healthz is None else healthz
        self.multi_user = (bool(self.healthz.get("multi_user", self.healthz.get(
            "apiServerMultiUser"))) if multi_user is None else multi_user)
        self.calls: list[dict] = []
        self.experiments: dict[str, dict] = {}
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, dict] = {}  # version id → {"pipeline_id", "spec"}
        self.runs: dict[str, dict] = {}
        self.recurring: dict[str, dict] = {}
        standin = self

        class Handler(JsonRequestHandler):
            def _reply(self, body: dict, code: int = 200) -> None:
                reply_json(self, body, code)

            def _reject(self, problems: list[str]) -> None:
                # InvalidInputError is gRPC InvalidArgument (3), HTTP 400 through the gateway.
                message = "; ".join(problems)
                standin.calls[-1]["rejected"] = message
                self._reply({"error": message, "code": 3, "message": message}, 400)

            def _record(self, method: str) -> dict:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urllib.parse.urlparse(self.path)
                call = {"method": method, "path": url.path,
                        "query": dict(urllib.parse.parse_qsl(url.query)),
                        "authorization": self.headers.get("Authorization"), "raw": raw}
                try:
                    call["body"] = json.loads(raw) if raw else None
                except ValueError:
                    call["body"] = None  # multipart uploads
                standin.calls.append(call)
                return call

            def _upload_error(self, code: int, message: str) -> None:
                """``writeErrorToResponse`` (pipeline_upload_server.go:388-397)."""
                standin.calls[-1]["rejected"] = message
                self._reply({"error_message": message, "error_details": message}, code)

            def _uploaded_spec(self, raw: bytes) -> dict:
                """The pipeline spec in a multipart upload (``uploadfile``)."""
                message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n"
                    + raw)
                for part in message.iter_parts():
                    documents = list(yaml.safe_load_all(part.get_content()))
                    return pipeline_spec_of(documents[0])
                return {}

            def do_GET(self):
                call = self._record("GET")
                path, query = call["path"], call["query"]
                if path == f"{API}/healthz":
                    return self._reply(standin.healthz)
                if path == f"{API}/experiments":
                    name = _filter_value(query)
                    found = [e for e in standin.experiments.values() if e["display_name"] == name]
                    return self._reply({"experiments": found, "total_size": len(found)}
                                       if found else {})
                if path == f"{API}/pipelines":
                    name = _filter_value(query)
                    namespace = standin.replace_namespace(query.get("namespace", ""))
                    found = [p for p in standin.pipelines.values()
                             if p["display_name"] == name and p["namespace"] == namespace]
                    return self._reply({"pipelines": found, "total_size": len(found)}
                                       if found else {})
                if match := re.fullmatch(f"{API}/pipelines/([^/]+)/versions", path):
                    return self._reply({"pipeline_versions": [
                        {"pipeline_id": match[1], "pipeline_version_id": version_id}
                        for version_id, version in standin.versions.items()
                        if version["pipeline_id"] == match[1]]})
                if match := re.fullmatch(f"{API}/runs/([^/]+)", path):
                    return self._reply({"run_id": match[1], "state": "SUCCEEDED"})
                if path == f"{API}/recurringruns":
                    return self._reply({"recurringRuns": list(standin.recurring.values())})
                self._reply({"error": "not found", "code": 5}, 404)

            def _source_problems(self, body: dict) -> tuple[dict, list[str]]:
                """The pipeline spec a run or recurring run names, and what is wrong."""
                problems = []
                if not body.get("display_name"):
                    problems.append("The name is empty. Please specify a valid name")
                experiment = body.get("experiment_id")
                if experiment and experiment not in standin.experiments:
                    problems.append(f"experiment {experiment} does not exist")
                sources = [k for k in ("pipeline_spec", "pipeline_version_reference")
                           if body.get(k)]
                spec: dict = {}
                if len(sources) != 1:
                    problems.append("give one pipeline source: pipeline_spec or "
                                    f"pipeline_version_reference (got {sources or 'none'})")
                elif sources == ["pipeline_spec"]:
                    spec = pipeline_spec_of(body["pipeline_spec"])
                else:
                    reference = body["pipeline_version_reference"]
                    version = standin.versions.get(reference.get("pipeline_version_id", ""))
                    if version is None:
                        problems.append(f"no pipeline version {reference}")
                    else:
                        spec = version["spec"]
                if "runtime_config" not in body:
                    problems.append("Failed to convert API runtime config to its internal "
                                    "representation. Input cannot be nil")
                elif spec:
                    problems += input_problems(
                        spec, body["runtime_config"].get("parameters") or {})
                return spec, problems

            def do_POST(self):
                call = self._record("POST")
                path, body = call["path"], call["body"]
                if path == f"{API}/experiments":
                    experiment = {**body, "experiment_id": f"exp-{len(standin.experiments) + 1}"}
                    standin.experiments[experiment["experiment_id"]] = experiment
                    return self._reply(experiment)
                if path == f"{API}/runs":
                    _, problems = self._source_problems(body)
                    if problems:
                        return self._reject(problems)
                    run = {**body, "run_id": f"run-{len(standin.runs) + 1}", "state": "PENDING"}
                    standin.runs[run["run_id"]] = run
                    return self._reply(run)
                if path == f"{API}/pipelines/upload":
                    query = call["query"]
                    name = query.get("name", "")
                    namespace = standin.replace_namespace(query.get("namespace", ""))
                    if any((p["name"], p["namespace"]) == (name, namespace)
                           for p in standin.pipelines.values()):
                        return self._upload_error(
                            409, "Failed to create a pipeline and a pipeline version")
                    pipeline = {"pipeline_id": f"pipeline-{len(standin.pipelines) + 1}",
                                "name": name, "display_name": query.get("display_name") or name,
                                "namespace": namespace}
                    standin.pipelines[pipeline["pipeline_id"]] = pipeline
                    standin.versions[f"version-{len(standin.versions) + 1}"] = {
                        "pipeline_id": pipeline["pipeline_id"], "name": name,
                        "spec": self._uploaded_spec(call["raw"])}
                    return self._reply(pipeline)
                if path == f"{API}/pipelines/upload_version":
                    pipeline_id = call["query"].get("pipelineid", "")
                    name = call["query"].get("name", "")
                    if pipeline_id not in standin.pipelines:
                        return self._upload_error(400, "Failed to create a pipeline version")
                    if any((v["pipeline_id"], v["name"]) == (pipeline_id, name)
                           for v in standin.versions.values()):
                        return self._upload_error(409, "Failed to create a pipeline version")
                    version_id = f"version-{len(standin.versions) + 1}"
                    standin.versions[version_id] = {
                        "pipeline_id": pipeline_id, "name": name,
                        "spec": self._uploaded_spec(call["raw"])}
                    return self._reply({"pipeline_id": pipeline_id,
                                        "pipeline_version_id": version_id,
                                        "display_name": name})
                if path == f"{API}/recurringruns":
                    _, problems = self._source_problems(body)
                    concurrency = int(body.get("max_concurrency") or 0)
                    if not 1 <= concurrency <= 10:
                        problems.append("Max concurrency of a recurring run must be at least 1 "
                                        f"and at most 10. Received {concurrency}")
                    trigger = body.get("trigger") or {}
                    cron = (trigger.get("cron_schedule") or {}).get("cron")
                    interval = (trigger.get("periodic_schedule") or {}).get("interval_second")
                    if cron is None and interval is None:
                        problems.append("a trigger needs a cron or a periodic schedule")
                    elif cron is not None and (problem := cron_problem(cron)):
                        problems.append(problem)
                    if body.get("mode") != "ENABLE":
                        problems.append(f"mode {body.get('mode')!r}: the recurring run would "
                                        "be created disabled")
                    if problems:
                        return self._reject(problems)
                    recurring_id = f"recurring-{len(standin.recurring) + 1}"
                    recurring = {**body, "recurring_run_id": recurring_id, "status": "ENABLED"}
                    standin.recurring[recurring_id] = recurring
                    return self._reply(recurring)
                if match := re.fullmatch(f"{API}/recurringruns/([^/:]+):disable", path):
                    standin.recurring[match[1]]["status"] = "DISABLED"
                    return self._reply({})
                self._reply({"error": "not found", "code": 5}, 404)

        self._serve(Handler)

    def replace_namespace(self, namespace: str) -> str:
        """``ReplaceNamespace``: single-user mode has one, empty, namespace."""
        return namespace if self.multi_user else ""

    def find(self, method: str, path: str) -> list[dict]:
        return [c for c in self.calls if c["method"] == method and c["path"] == path]


def _filter_value(query: dict) -> str:
    try:
        return json.loads(query.get("filter", "{}"))["predicates"][0]["string_value"]
    except (KeyError, IndexError, ValueError):
        try:
            return json.loads(query.get("filter", "{}"))["predicates"][0]["stringValue"]
        except (KeyError, IndexError, ValueError):
            return ""
