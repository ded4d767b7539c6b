"""The plumbing the HTTP stand-ins share: a threaded server on 127.0.0.1 and JSON replies."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def reply_bytes(handler: BaseHTTPRequestHandler, data: bytes, code: int = 200,
                content_type: str = "application/json") -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def reply_json(handler: BaseHTTPRequestHandler, body: dict, code: int = 200) -> None:
    reply_bytes(handler, json.dumps(body).encode(), code)


class JsonRequestHandler(BaseHTTPRequestHandler):
    """A quiet request handler for JSON APIs: the stand-ins' handlers extend it."""

    def log_message(self, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None


def recording_handler(standin) -> type[JsonRequestHandler]:
    """A handler that appends ``(method, path, body)`` to ``standin.calls`` and hands each
    request to ``standin.on_post`` / ``on_get`` / ``on_delete`` (after :func:`faulted`: the
    request recorded, and answered by the fault mode when one is active)."""

    class Handler(JsonRequestHandler):
        def do_POST(self):
            if faulted(self, "POST"):
                return
            body = self._body()
            standin.calls.append(("POST", self.path, body))
            standin.on_post(self, body)

        def do_GET(self):
            if faulted(self, "GET"):
                return
            standin.calls.append(("GET", self.path, None))
            standin.on_get(self)

        def do_DELETE(self):
            if faulted(self, "DELETE"):
                return
            standin.calls.append(("DELETE", self.path, self._body()))
            standin.on_delete(self)

    return Handler


class LoopbackServer:
    """Serves ``handler_class`` on a free loopback port for the length of a ``with`` block."""

    def _serve(self, handler_class: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


# -- what our code sends, and faults: shared by every API stand-in ------------------------------

_REQUEST = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<resource>[^/?]+)(?:/(?P<name>[^/?]+))?"
    r"(?:/(?P<sub>[^/?]+))?/?$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_attributes(method: str, path: str) -> tuple[str, str, str, str, str] | None:
    """``(verb, group, resource, subresource, namespace)`` of a resource request, as the API
    server's authorizer sees it (kubernetes/apiserver v0.33.9 ``pkg/endpoints/request/
    requestinfo.go`` ``NewRequestInfo``: GET of a name is ``get``, of a collection ``list`` or
    ``watch`` with ``?watch=true``; POST ``create``; PUT ``update``; PATCH ``patch``; DELETE of a
    name ``delete``, of a collection ``deletecollection``); None for discovery and other
    non-resource paths. A ``/namespaces/<ns>`` path with no more is the namespace itself."""
    split = urlsplit(path)
    match = _REQUEST.match(split.path)
    if not match:
        return None
    group = match["group"] or ""
    if not match["core"] and match["resource"] and not match["namespace"] and \
            match["name"] is None and split.path.count("/") == 3:
        return None  # /apis/<group>/<version>/<x>: the shape of no resource request we send
    name = match["name"]
    if method == "GET":
        watch = parse_qs(split.query).get("watch", [""])[0] in ("true", "1")
        verb = "get" if name else ("watch" if watch else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, group, match["resource"], match["sub"] or "", match["namespace"] or ""


_RECORDINGS: list[set] = []


@contextlib.contextmanager
def recording():
    """Every ``request_attributes`` any stand-in serves meanwhile, in one set."""
    found: set = set()
    _RECORDINGS.append(found)
    try:
        yield found
    finally:
        _RECORDINGS.remove(found)


def record(method: str, path: str) -> None:
    attributes = request_attributes(method, path)
    if attributes is not None:
        for found in list(_RECORDINGS):
            found.add(attributes)


class FaultMode:
    """Seeded, repeatable faults for every API stand-in, as a busy API server behind a flaky
    network gives them: latency on every call (up to ``latency`` s); now and then (``rate``) a
    transient answer — 429 TooManyRequests with Retry-After (kubernetes/apiserver v0.33.9
    ``pkg/server/filters/maxinflight.go``, priority and fairness), 500, 503, 504 — an update
    answered 409 Conflict as if another writer got there first (optimistic concurrency: the
    caller must re-read; ``tests/standins/apiserver.py``), or a read whose answer never comes
    (the connection held ``hold`` s, then closed: a timed-out read or watch). Never two faults
    in a row on the same request, so a client that retries gets through. The same seed and the
    same sequence of requests give the same faults."""

    KINDS = ("latency-only", 429, 500, 503, 504, "conflict", "timeout")

    def __init__(self, seed: int, *, rate: float = 0.1, latency: float = 0.004,
                 hold: float = 0.3):
        self.seed = seed
        self.random = random.Random(seed)
        self.rate, self.latency, self.hold = rate, latency, hold
        self.injected: list[tuple[str, str, object]] = []
        self._last_faulted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def decide(self, method: str, path: str):
        """None, or the fault for this request: a status code, ``"conflict"``, ``"timeout"``;
        sleeps the call's latency first."""
        key = (method, urlsplit(path).path)
        with self._lock:
            delay = self.random.uniform(0, self.latency)
            roll = self.random.random()
            pick = self.random.choice((429, 500, 503, 504, "conflict", "timeout"))
            if key in self._last_faulted or roll >= self.rate or \
                    request_attributes(method, path) is None:
                self._last_faulted.discard(key)
                pick = None
            elif pick == "conflict" and method not in ("PUT", "PATCH"):
                # Only an update can lose an optimistic-concurrency race: a create's one 409
                # is AlreadyExists, for a name that exists (kubernetes/apiserver v0.33.9
                # pkg/storage/etcd3/store.go Create, lines 249-300: NewKeyExistsError), which
                # the stand-ins' stores answer themselves; pkg/registry/generic/registry/
                # store.go line 733: the update's NewConflict.
                pick = 503
            elif pick == "timeout" and method != "GET":
                pick = 504
            if pick is not None:
                self._last_faulted.add(key)
                self.injected.append((method, key[1], pick))
        time.sleep(delay)
        return pick

    def apply(self, handler, method: str) -> bool:
        """Answers ``handler``'s request with a fault when one is decided; True when it did."""
        pick = self.decide(method, handler.path)
        if pick is None:
            return False
        if pick == "timeout":
            time.sleep(self.hold)
            handler.close_connection = True
            return True
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            handler._body()  # read what was sent, so the connection stays in step
        if pick == "conflict":
            reply_json(handler, _status(409, "Conflict", "Operation cannot be fulfilled: the "
                                        "object has been modified; please apply your changes "
                                        "to the latest version and try again"), 409)
            return True
        reasons = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                   504: "Timeout"}
        data = json.dumps(_status(pick, reasons[pick], f"injected {pick} (fault mode, seed "
                                                       f"{self.seed})")).encode()
        handler.send_response(pick)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        if pick == 429:
            handler.send_header("Retry-After", "1")
        handler.end_headers()
        handler.wfile.write(data)
        return True


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


ENVIRONMENT = "FMNIST_STANDIN_FAULTS"  # a seed: every stand-in of the process faults
_ACTIVE: list[FaultMode] = []
if os.environ.get(ENVIRONMENT, "").strip():
    _ACTIVE.append(FaultMode(int(os.environ[ENVIRONMENT])))


@contextlib.contextmanager
def faults(seed: int, **options):
    """Fault mode (:class:`FaultMode`) for every stand-in while the block runs."""
    mode = FaultMode(seed, **options)
    _ACTIVE.append(mode)
    try:
        yield mode
    finally:
        _ACTIVE.remove(mode)


def faulted(handler, method: str) -> bool:
    """Records the request, then applies the active fault mode; True when a fault answered."""
    record(method, handler.path)
    return bool(_ACTIVE) and _ACTIVE[-1].apply(handler, method)
