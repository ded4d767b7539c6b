"""A stand-in for the Kubeflow Pipelines REST API (v2beta1): it records what ``kfp.Client``
sends and answers with the smallest valid replies. It checks our requests; it runs nothing."""

from __future__ import annotations

import json
import re
import urllib.parse

from tests.loopback import JsonRequestHandler, LoopbackServer, reply_json

API = "/apis/v2beta1"


# What KFP 2.15.0's API server answers on /apis/v2beta1/healthz (kubeflow/pipelines 2.15.0
# backend/src/apiserver/main.go L362-364; released images say tag_name "unknown" before 2.16).
HEALTHZ_2_15 = {"commit_sha": "unknown", "tag_name": "unknown", "multi_user": False,
                "pipeline_store": "database"}


class KfpStandIn(LoopbackServer):
    def __init__(self, healthz: dict | None = None):
        self.healthz = HEALTHZ_2_15 if healthz is None else healthz
        self.calls: list[dict] = []
        self.experiments: dict[str, dict] = {}
        self.pipelines: dict[str, dict] = {}
        self.recurring: dict[str, dict] = {}
        standin = self

        class Handler(JsonRequestHandler):
            def _reply(self, body: dict, code: int = 200) -> None:
                reply_json(self, body, code)

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
                    found = [p for p in standin.pipelines.values() if p["display_name"] == name]
                    return self._reply({"pipelines": found} if found else {})
                if match := re.fullmatch(f"{API}/pipelines/([^/]+)/versions", path):
                    return self._reply({"pipeline_versions": [
                        {"pipeline_id": match[1], "pipeline_version_id": "version-1"}]})
                if match := re.fullmatch(f"{API}/runs/([^/]+)", path):
                    return self._reply({"run_id": match[1], "state": "SUCCEEDED"})
                if path == f"{API}/recurringruns":
                    return self._reply({"recurringRuns": list(standin.recurring.values())})
                self._reply({"error": "not found", "code": 5}, 404)

            def do_POST(self):
                call = self._record("POST")
                path, body = call["path"], call["body"]
                if path == f"{API}/experiments":
                    experiment = {**body, "experiment_id": f"exp-{len(standin.experiments) + 1}"}
                    standin.experiments[experiment["experiment_id"]] = experiment
                    return self._reply(experiment)
                if path == f"{API}/runs":
                    return self._reply({**body, "run_id": "run-1", "state": "PENDING"})
                if path == f"{API}/pipelines/upload":
                    name = call["query"].get("name", "")
                    pipeline = {"pipeline_id": f"pipeline-{len(standin.pipelines) + 1}",
                                "display_name": name}
                    standin.pipelines[pipeline["pipeline_id"]] = pipeline
                    return self._reply(pipeline)
                if path == f"{API}/pipelines/upload_version":
                    return self._reply({"pipeline_id": call["query"].get("pipelineid"),
                                        "pipeline_version_id": "version-2",
                                        "display_name": call["query"].get("name")})
                if path == f"{API}/recurringruns":
                    recurring = {**body, "recurring_run_id": "recurring-1", "status": "ENABLED"}
                    standin.recurring["recurring-1"] = recurring
                    return self._reply(recurring)
                if match := re.fullmatch(f"{API}/recurringruns/([^/:]+):disable", path):
                    standin.recurring[match[1]]["status"] = "DISABLED"
                    return self._reply({})
                self._reply({"error": "not found", "code": 5}, 404)

        self._serve(Handler)

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
