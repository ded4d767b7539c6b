"""A fault-injecting proxy in front of the real kube-apiserver: the seeded fault mode of the old
API stand-ins (tests/standins/loopback.py ``FaultMode``), on real semantics.

:class:`FaultProxy` listens on loopback with a serving certificate of its own CA (made fresh in
``state_dir``, :mod:`localcluster.certs`), and forwards every request to the API server of the
kubeconfig it is given, over TLS verified with the cluster's CA. The caller's
``Authorization`` header is passed through as it came, so the API server's authenticator and
RBAC judge the caller, not the proxy (which holds no credential of its own). Answers are
streamed: a response without ``Content-Length`` (a watch, ``pods/log``) is relayed chunk by
chunk as it arrives. Connection upgrades (``exec``, ``attach``, ``portforward``) are not
proxied: they are answered 501.

Faults, decided per request from ``random.Random`` seeded with ``seed`` and the request's key
(method, path, whether it streams, and how many requests of that key came before it). So the
same seed gives the same faults to the same requests of a key however the requests of
different keys interleave (a client's threads, its polls' timing):

* **latency** on every request, up to ``latency`` seconds (not a fault: not recorded);
* at rate ``rate``, one of the :data:`KINDS` that fits the request:

  - ``409`` Conflict (only to an update, PUT or PATCH: the one 409 a create can get is
    AlreadyExists, for a name that exists, which the API server answers itself), ``429``
    TooManyRequests with ``Retry-After: 1``, ``500``, ``503``, ``504``: a Kubernetes ``Status``
    answered *instead of* forwarding the request, so a faulted write was not applied;
  - ``drop``: the connection closed before the request is forwarded (nothing applied, no
    answer);
  - ``stall``: as ``drop``, after holding the connection ``hold`` seconds (a read that times
    out; GET only);
  - ``lost``: the request *is* forwarded and applied, and the connection closed before the
    answer is relayed: the hard case, where a create went through and the client saw only a
    dropped connection (its retry gets 409 AlreadyExists); never to a streaming request;
  - ``cut``: a streaming request (``watch=true``, ``follow=true``) forwarded, its first
    1 to 3 pieces relayed, then the connection closed mid-stream, without the last chunk;
  - only where ``kinds`` names them (:data:`ASKED_ONLY`): ``401``, ``403``, ``410`` answered
    as the API server answers a bad token, a denied request or an expired resource version,
    and ``hold``: the request held ``hold`` seconds, then forwarded and answered (a slow
    create: what a step's SIGTERM can arrive during).

  Never two faults in a row on one key, so a client that retries gets through, unless
  ``in_a_row``: then a server that keeps failing (with ``rate`` 1, every request ``only``
  chooses), which a client's retries do not get through.

Each fault given is recorded in :attr:`FaultProxy.injected` (method, path, kind), each request
in :attr:`FaultProxy.requests` (method, path with query, the status relayed or the fault), so
a test can assert that faults did happen.

Usage::

    proxy = FaultProxy(cluster.kubeconfig, seed=11).start()
    api = proxy.api_client(token)          # kubernetes.client.ApiClient at the proxy
    ...
    proxy.stop()
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from localcluster import certs

STATUS_FAULTS = (409, 429, 500, 503, 504)
KINDS = (*STATUS_FAULTS, "drop", "stall", "lost", "cut")
# Given only where ``kinds`` asks for them: answers that are no fault of the server's (the
# caller's token or RBAC, a resource version too old) and a slow answer.
REFUSALS = (401, 403, 410)
ASKED_ONLY = (*REFUSALS, "hold")
_REASONS = {401: "Unauthorized", 403: "Forbidden", 409: "Conflict", 410: "Gone",
            429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}
# RFC 7230 6.1: hop-by-hop headers, which a proxy does not forward.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                         "proxy-authorization", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length"})
_PIECE = 64 * 1024


@dataclass(frozen=True)
class Injected:
    """A fault given: the request's method and path (without query), and the fault's kind."""

    method: str
    path: str
    kind: int | str


def status_body(code: int, message: str) -> dict:
    """A Kubernetes ``Status`` of failure, as the API server answers one."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": _REASONS.get(code, "Unknown"), "code": code}
    if code == 429:
        body["details"] = {"retryAfterSeconds": 1}
    return body


def streaming(method: str, target: str) -> bool:
    """A watch or a followed log: an answer that streams until the server or client ends it."""
    query = parse_qs(urlsplit(target).query)
    flags = [v.lower() for key in ("watch", "follow") for v in query.get(key, [])]
    return method == "GET" and any(v in ("true", "1") for v in flags)


def kinds_for(method: str, target: str, asked: tuple = ()) -> tuple:
    """The fault kinds that fit a request (see the module docstring); ``asked``: the kinds a
    proxy was asked for, which alone give those of :data:`ASKED_ONLY`."""
    given = tuple(k for k in ASKED_ONLY if k in asked)
    if streaming(method, target):
        return (429, 500, 503, 504, "drop", "cut", *given)
    kinds = [429, 500, 503, 504, "drop", "lost", *given]
    if method in ("PUT", "PATCH"):
        kinds.append(409)
    if method == "GET":
        kinds.append("stall")
    return tuple(kinds)


class FaultProxy:
    """The proxy; see the module docstring. ``kubeconfig``: the API server's (its server, its
    CA, and a token :meth:`configuration` uses when given none). ``seed`` None: no faults, no
    latency (a faithful proxy). ``kinds``: the only kinds given (default: all that fit).
    ``only``: a predicate of (method, path with query) choosing the requests that may be
    faulted (default: all). ``in_a_row``: faults may follow faults on one key."""

    def __init__(self, kubeconfig: Path | str, seed: int | None = None, *, rate: float = 0.1,
                 latency: float = 0.01, hold: float = 0.5, kinds: tuple | None = None,
                 only=None, in_a_row: bool = False, state_dir: Path | str | None = None):
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context = next(c["context"] for c in config["contexts"]
                       if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"]
                       if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        upstream = urlsplit(cluster["server"])
        self.upstream = (upstream.hostname, upstream.port or 443)
        self.upstream_ca = cluster["certificate-authority"]
        self.token = user.get("token")
        self.namespace = context.get("namespace", "default")
        self.seed, self.rate, self.latency, self.hold = seed, rate, latency, hold
        self.kinds = tuple(kinds) if kinds is not None else None
        self.only = only
        self.in_a_row = in_a_row
        self.injected: list[Injected] = []
        self.requests: list[tuple[str, str, int | str]] = []
        self._state_dir = Path(state_dir) if state_dir else None
        self._temporary: tempfile.TemporaryDirectory | None = None
        self._lock = threading.Lock()
        self._seen: dict[tuple, int] = {}
        self._last_faulted: set[tuple] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._upstreams: set[http.client.HTTPSConnection] = set()

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the proxy first"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA of the proxy's serving certificate: what its clients verify it with."""
        return self._pki / "ca.crt"

    def start(self) -> FaultProxy:
        if self._state_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="fault-proxy-")
            self._state_dir = Path(self._temporary.name)
        self._pki = self._state_dir / "proxy-pki"
        self._pki.mkdir(parents=True, exist_ok=True)
        ca = certs.make_ca(self._pki, "fmnist-kfp-fault-proxy-ca")
        cert, key = certs.make_serving_cert(self._pki, "proxy", ca, ("localhost",),
                                            ("127.0.0.1",))
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(cert, key)
        self._upstream_context = ssl.create_default_context(cafile=str(self.upstream_ca))
        self._server = _Server(("127.0.0.1", 0), _handler(self), serving)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops listening and ends the streams in flight."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            upstreams, self._upstreams = list(self._upstreams), set()
        for connection in upstreams:
            _close_quietly(connection)
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- clients --------------------------------------------------------------------------

    def configuration(self, token: str | None = None):
        """A ``kubernetes.client.Configuration`` at the proxy, with ``token`` (default: the
        kubeconfig's) as the bearer token the proxy passes through."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"authorization": token or self.token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return configuration

    def api_client(self, token: str | None = None):
        """A ``kubernetes.client.ApiClient`` at the proxy (see :meth:`configuration`)."""
        from kubernetes import client

        return client.ApiClient(self.configuration(token))

    def kubeconfig(self, path: Path | str, token: str | None = None) -> Path:
        """Writes a kubeconfig at the proxy (kubectl's format) to ``path``."""
        path = Path(path)
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fault-proxy",
            "clusters": [{"name": "fault-proxy", "cluster": {
                "server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "caller", "user": {"token": token or self.token}}],
            "contexts": [{"name": "fault-proxy", "context": {
                "cluster": "fault-proxy", "user": "caller", "namespace": self.namespace}}],
        }, indent=1))
        path.chmod(0o600)
        return path

    # --- faults ---------------------------------------------------------------------------

    def decide(self, method: str, target: str) -> tuple[float, int | str | None, int]:
        """(latency, fault or None, pieces relayed before a ``cut``) for one request."""
        if self.seed is None:
            return 0.0, None, 0
        stream = streaming(method, target)
        key = (method, urlsplit(target).path, stream)
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            draw = random.Random(f"{self.seed}|{method}|{key[1]}|{stream}|{n}")
            delay = draw.uniform(0, self.latency)
            roll = draw.random()
            fits = [k for k in kinds_for(method, target, self.kinds or ())
                    if self.kinds is None or k in self.kinds]
            pick = draw.choice(fits) if fits else None
            pieces = draw.randint(1, 3)
            again = key in self._last_faulted and not self.in_a_row
            if again or roll >= self.rate or pick is None or (
                    self.only is not None and not self.only(method, target)):
                self._last_faulted.discard(key)
                pick = None
            else:
                self._last_faulted.add(key)
                self.injected.append(Injected(method, key[1], pick))
        return delay, pick, pieces

    def _record(self, method: str, target: str, outcome: int | str) -> None:
        with self._lock:
            self.requests.append((method, target, outcome))

    def _connect(self) -> http.client.HTTPSConnection:
        connection = http.client.HTTPSConnection(*self.upstream, context=self._upstream_context)
        with self._lock:
            self._upstreams.add(connection)
        return connection

    def _release(self, connection: http.client.HTTPSConnection) -> None:
        with self._lock:
            self._upstreams.discard(connection)
        _close_quietly(connection)


def _close_quietly(connection) -> None:
    try:
        if connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    connection.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler, context: ssl.SSLContext):
        self.context = context
        super().__init__(address, handler)

    def finish_request(self, request, client_address):
        # The TLS handshake in the request's own thread, not in the accepting one.
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        pass  # a client gone mid-answer: its own business


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, chunked answers

        def log_message(self, *args):
            pass

        def do_GET(self):
            self._proxy()

        do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

        def _body(self) -> bytes | None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                data = b""
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    data += self.rfile.read(size)
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return data
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else None

        def _status(self, code: int, message: str, close: bool = False) -> None:
            data = json.dumps(status_body(code, message)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if code == 429:
                self.send_header("Retry-After", "1")
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def _proxy(self) -> None:
            method, target = self.command, self.path
            body = self._body()
            if self.headers.get("Upgrade"):
                proxy._record(method, target, 501)
                self._status(501, "the fault proxy does not proxy connection upgrades "
                                  "(exec, attach, portforward)", close=True)
                return
            delay, fault, pieces = proxy.decide(method, target)
            if delay:
                time.sleep(delay)
            if fault is not None:
                proxy._record(method, target, fault)
            if isinstance(fault, int):
                self._status(fault, f"injected {fault} {_REASONS[fault]} (fault proxy, seed "
                                    f"{proxy.seed})")
                return
            if fault in ("stall", "hold"):
                time.sleep(proxy.hold)
            if fault in ("drop", "stall"):
                self._drop()
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            upstream = proxy._connect()
            try:
                try:
                    upstream.request(method, target, body=body, headers=headers)
                    answer = upstream.getresponse()
                except (OSError, http.client.HTTPException) as error:
                    proxy._record(method, target, 502)
                    self._status(502, f"the fault proxy could not reach the API server: "
                                      f"{error}", close=True)
                    return
                if fault == "lost":
                    answer.read()  # applied upstream; the answer goes nowhere
                    self._drop()
                    return
                if fault is None:
                    proxy._record(method, target, answer.status)
                self._relay(answer, method, pieces if fault == "cut" else 0)
            finally:
                proxy._release(upstream)

        def _relay(self, answer: http.client.HTTPResponse, method: str, cut_after: int) -> None:
            self.send_response_only(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in _HOP_BY_HOP:
                    self.send_header(name, value)
            no_body = method == "HEAD" or answer.status in (204, 304) or \
                100 <= answer.status < 200
            length = answer.getheader("Content-Length")
            if no_body:
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                return
            if length is not None and not cut_after:
                self.send_header("Content-Length", length)
                self.end_headers()
                while data := answer.read(_PIECE):
                    self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            relayed = 0
            while data := answer.read1(_PIECE):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                relayed += 1
                if cut_after and relayed >= cut_after:
                    self._drop()  # mid-stream: no last chunk
                    return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
