"""What the API server stand-ins (tests/standins/: Katib, KServe, the generic API server)
share; none is a cluster, and the training operators run for real (tests/cluster.py). Each rule
cites the upstream file and tag it comes from:

* admission, in the API server's order (:func:`admission`): a version the CRD does not serve
  is 404 (kubernetes/apiextensions-apiserver v0.31.3 pkg/apiserver/customresource_handler.go
  lines 278-279, delegating to a NotFound handler, apiserver.go 170-172); a body apiVersion
  that is not the path's is 400 (kubernetes/apiserver v0.31.3 pkg/endpoints/handlers/create.go
  142-146); a name that is no DNS-1123 subdomain, or a wrong kind, is 422 Invalid
  (apiextensions-apiserver v0.31.3 pkg/registry/customresource/validator.go line 53 and
  pkg/registry/customresource/validator.go 111-122, run by the strategy before admission
  webhooks: pkg/registry/generic/registry/store.go 482-488); then the kind's validating webhook
  (controller-runtime v0.19.1 pkg/webhook/admission/response.go 63-75; message format from
  kubernetes/apiserver v0.31.3 pkg/admission/plugin/webhook/errors/statuserror.go 29-47);
* label selectors, equality and inequality terms (kubernetes/apimachinery v0.31.3
  pkg/labels/selector.go: :func:`selects`);
* faults can be injected into any later request (:class:`FaultyServer`): an HTTP status (5xx,
  404, 429), a timeout (the reply is held until the client has given up), or a dropped
  connection.
"""

from __future__ import annotations

import re
import threading
from collections import deque

from tests.standins.loopback import LoopbackServer, reply_json

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # apimachinery validation.go line 225
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
HOLD_SECONDS = 30  # the longest a held request (a timeout, a gated create) waits


def status_body(code: int, reason: str, message: str = "", **details) -> dict:
    """A ``metav1.Status`` as the API server writes it for an error."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code, **details}


# metav1.StatusReason by code (kubernetes/apimachinery v0.31.3 pkg/apis/meta/v1/types.go lines
# 833-964; 410 is Expired, a resourceVersion too old: pkg/api/errors/errors.go lines 270-279).
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           408: "Timeout", 409: "AlreadyExists", 410: "Expired", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (apimachinery v0.31.3 pkg/labels/selector.go):
    ``k=v``, ``k==v``, ``k!=v`` and a bare ``k`` (exists), comma-separated, all must hold."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class Gate:
    """Holds matching requests until :meth:`release` (or ``HOLD_SECONDS``): ``arrived`` is set
    once one is being held."""

    def __init__(self):
        self.arrived = threading.Event()
        self._released = threading.Event()

    def hold(self) -> None:
        self.arrived.set()
        self._released.wait(HOLD_SECONDS)

    def release(self) -> None:
        self._released.set()


class FaultyServer(LoopbackServer):
    """Records calls, injects faults and gates requests; the stand-ins extend it."""

    def _init_faults(self) -> None:
        self.calls: list[tuple[str, str, dict | None]] = []
        self._faults: dict[tuple[str, str], deque] = {}
        self._gates: dict[tuple[str, str], Gate] = {}
        self._held = threading.Event()  # released when the server stops
        # How long a "timeout" fault holds its request: past the client's request timeout, and
        # short, so the held request does not occupy the client's thread pool for long.
        self.timeout_hold_seconds = 1.0
        self.lock = threading.RLock()

    def inject(self, method: str, resource: str, *faults) -> None:
        """The next requests of ``method`` on ``resource`` (``tfjobs``, ``pods``, ``log``,
        ``experiments``, ``trials``) get ``faults`` in order: an HTTP status code,
        ``"timeout"`` (held ``timeout_hold_seconds``, then closed without an answer), or
        ``"reset"`` (closed at once without an answer)."""
        self._faults.setdefault((method, resource), deque()).extend(faults)

    def gate(self, method: str, resource: str) -> Gate:
        """The next ``method`` request on ``resource`` is held at the :class:`Gate`."""
        gate = Gate()
        self._gates[(method, resource)] = gate
        return gate

    def _fault(self, handler, method: str, resource: str) -> bool:
        """Applies an injected fault; True when the request was answered by it."""
        gate = self._gates.pop((method, resource), None)
        if gate is not None:
            gate.hold()
        queue = self._faults.get((method, resource))
        if not queue:
            return False
        fault = queue.popleft()
        if fault == "timeout":
            self._held.wait(self.timeout_hold_seconds)
            handler.close_connection = True
            return True
        if fault == "reset":
            handler.close_connection = True
            return True
        reply_json(handler, status_body(fault, REASONS.get(fault, "Unknown"),
                                        f"injected HTTP {fault}"), fault)
        return True

    def _serve(self, handler_class) -> None:
        super()._serve(handler_class)
        # serve_forever's default 0.5 s poll would make every test's shutdown wait that long.
        self.thread = threading.Thread(
            target=lambda: self.server.serve_forever(poll_interval=0.01), daemon=True)

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path.split("?")[0]) for method, path, _ in self.calls]

    def posts(self) -> list[dict]:
        return [body for method, _, body in self.calls if method == "POST"]

    def __exit__(self, *exc):
        self._held.set()
        for gate in self._gates.values():
            gate.release()
        return super().__exit__(*exc)


def admission(handler, body: dict, version: str, *, group: str, served: str, kind: str,
              plural: str, webhook: str, webhook_code: int, problems) -> bool:
    """The API server's create path for a custom resource up to storage; True when it
    answered (refused the request). See the module docstring for the order and citations."""
    if version != served:
        reply_json(handler, status_body(404, "NotFound", "the server could not find the "
                                        "requested resource"), 404)
        return True
    expected = f"{group}/{served}"
    if body.get("apiVersion") != expected:
        reply_json(handler, status_body(400, "BadRequest", f"the API version in the data "
                                        f"({body.get('apiVersion')}) does not match the "
                                        f"expected API version ({expected})"), 400)
        return True
    name = (body.get("metadata") or {}).get("name", "")
    # apiextensions-apiserver v0.31.3 pkg/registry/customresource/validator.go line 53: the
    # name of any custom resource is a DNS-1123 subdomain (apimachinery validation.go).
    if len(name) > 253 or not _DNS_1123_SUBDOMAIN.fullmatch(name):
        reply_json(handler, status_body(
            422, "Invalid", f'{kind}.{group} "{name}" is invalid: metadata.name: Invalid value: '
            f'"{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
            "characters, '-' or '.', and must start and end with an alphanumeric character"),
            422)
        return True
    if body.get("kind") != kind:
        reply_json(handler, status_body(
            422, "Invalid", f'{kind}.{group} "{name}" is invalid: kind: Invalid value: '
            f'"{body.get("kind")}": must be {kind}',
            details={"name": name, "group": group, "kind": kind}), 422)
        return True
    found = problems(body)
    if found:
        joined = found[0] if len(found) == 1 else "[" + ", ".join(found) + "]"
        reply_json(handler, status_body(
            webhook_code, REASONS[webhook_code],
            f'admission webhook "{webhook}" denied the request: {joined}'), webhook_code)
        return True
    return False


class FakeTime:
    """A monotonic clock and a sleep that advances it: the launchers' poll loops run without
    waiting, and their deadlines (in fake seconds) bound every test."""

    def __init__(self):
        self.now = 0.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
