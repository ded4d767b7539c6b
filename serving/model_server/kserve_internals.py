"""The one module that reaches below KServe's documented Python API.

What we use as documented: ``kserve.Model`` (the predictor,
:mod:`fmnist_kfp.serving.model_server.predictor`), ``kserve.ModelServer``'s constructor arguments
and ``start(models)``, ``kserve.errors`` and ``kserve.protocol.infer_type``. Four things we need
have no public hook in kserve 0.21, so the classes here subclass KServe's internals, each with its
reason in one line above it:

* bind ``--host`` (127.0.0.1 unless told otherwise; KServe binds every interface, kserve#4558)
  and port 0 with the bound ports reported, for REST, gRPC and the multi-process server;
* a body limit (413) and the V2 JSON Content-Type default in front of KServe's routes, and no
  per-request timing middleware unless an access log is asked for;
* binary-extension V2 tensors kept as bytes
  (:func:`fmnist_kfp.serving.model_server.protocol.binary_infer_request`);
* one event loop, uvloop's, in the main process.

:data:`PINNED` names every KServe function these classes override, copy or call, with the hash
of its source in the pinned kserve release; ``tests/serving/model_server/test_kserve_internals.py``
fails on any KServe whose source differs, naming what to re-read and what here to update.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent import futures
from http import HTTPStatus

from fastapi.responses import ORJSONResponse
from grpc import aio
from kserve import ModelServer
from kserve import model_server as kserve_model_server
from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER
from kserve.errors import InvalidInput
from kserve.logging import logger
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor, LoggingInterceptor
from kserve.protocol.grpc.server import GRPCServer
from kserve.protocol.grpc.servicer import InferenceServicer
from kserve.protocol.rest.multiprocess.server import RESTServerMultiProcess
from kserve.protocol.rest.server import RESTServer
from uvicorn.importer import import_from_string

from fmnist_kfp.serving.model_server.ports import bind_socket, write_port_file
from fmnist_kfp.serving.model_server.protocol import binary_infer_request
from fmnist_kfp.serving.model_server.request_gate import DEFAULT_MAX_BODY_BYTES, RequestGate

FASTAPI_APP = "kserve.model_server:app"  # KServe's FASTAPI_APP_IMPORT_STRING

# KServe's own code that the classes below override, copy or call: qualified name -> (our class
# that relies on it, sha256 of its ``inspect.getsource`` in kserve 0.21.0).
PINNED: dict[str, tuple[str, str]] = {
    "kserve.protocol.rest.server.RESTServer.__init__":
        ("GatedRESTServer", "c85b4ca79cab7f7c6156be4617962e06d2b3218f1f36bd23180fcf95f67ecbc7"),
    "kserve.protocol.rest.server.RESTServer.create_application":
        ("GatedRESTServer", "f821f63b402457eb46c56d064d42f08d80bae9078b7a7087ff1ff0ab92fb6eb4"),
    "kserve.protocol.rest.server.RESTServer._add_middlewares":
        ("GatedRESTServer", "eb71860ac9500c56d880d745367d2afe7edf315ef81a1f8e0e12921ee160f4df"),
    "kserve.protocol.rest.server.RESTServer._register_endpoints":
        ("GatedRESTServer", "841b714394633cb5213a28996b019eb7f9796babcc62ffe5cdb2790ef99e6b9e"),
    "kserve.protocol.rest.server.RESTServer._add_exception_handlers":
        ("GatedRESTServer", "ca0a28c1b356a6eb905d3cd11e2eaf431235a84ec2d1649cba07f2be48c27bc1"),
    "kserve.protocol.rest.server.RESTServer.start":
        ("GatedRESTServer", "5889df83b6d57baa944904f35fd0d8acfa032d664c3b983543d6e349ca93f5a3"),
    "kserve.protocol.grpc.server.GRPCServer.__init__":
        ("BoundGRPCServer", "d2f75891584958f5dc6572c2897a684c5c1e02834ec68d55314e25c577edbdd3"),
    "kserve.protocol.grpc.server.GRPCServer.start":
        ("BoundGRPCServer", "f4ea7b4eb6f0d9f7ac4947c7bda31531f4bf870529f9de0964a2dad2f6a7fb5e"),
    "kserve.protocol.grpc.servicer.InferenceServicer.__init__":
        ("BoundGRPCServer", "924b8fa08ae3d9f91fd6b49a35c861eef9710cfdf3af5490f279680032fab115"),
    "kserve.protocol.rest.multiprocess.server.RESTServerMultiProcess.__init__":
        ("PreboundMultiProcess",
         "ff15cd5a0c374e22fdb5da475d1ceb1a9468946380bc5970a8e713b803f42071"),
    "kserve.protocol.rest.multiprocess.server.RESTServerMultiProcess.start":
        ("PreboundMultiProcess",
         "b53cc368f07d8868cc7fe97986f66b5f2ad11cf3ed79ec1a60099f18ec39fa36"),
    "kserve.protocol.rest.multiprocess.server.RESTServerMultiProcess.init_processes":
        ("PreboundMultiProcess",
         "75142004d4ac292ebe3b4749da9145e47189bfaa06c2c5f283e8f1806f5474f0"),
    "kserve.protocol.rest.multiprocess.server.RESTServerMultiProcess.keep_subprocess_alive":
        ("PreboundMultiProcess",
         "22dd987ecf8b4f41b96d808f25367d8cc5ec216f7907ba788076da3da90e3aa5"),
    "kserve.protocol.rest.multiprocess.server.RESTServerMultiProcess.terminate_all":
        ("PreboundMultiProcess",
         "e2f956fe73417f7a491fac7f5fc6165f2b3d686bf0087c99f720db48a599a929"),
    "kserve.protocol.dataplane.DataPlane.__init__":
        ("BinaryDataPlane", "0c56f0c9d9b251710643c34dabc3a015502e1a911bf33bfbbc3bba775a8d273c"),
    "kserve.protocol.dataplane.DataPlane.decode_inference_request":
        ("BinaryDataPlane", "d9b169889aa3e5640287be64d1a86dffcebe3e69a692abb0c189344030b3b3c4"),
    "kserve.model_server.ModelServer.__init__":
        ("LoopbackModelServer", "1029569ff98894af0f4dafb28473cbe8a320e114613e088074722eb7ad5c6570"),
    "kserve.model_server.ModelServer.start":
        ("LoopbackModelServer", "efa96502018b04e9e1908fd8734fbddc84071d24256ae4cbd25d0e31bdd27d84"),
    "kserve.model_server.ModelServer._register_and_check_atleast_one_model_is_ready":
        ("LoopbackModelServer", "ea1c6e647744e3fdf0fc2c8fe20a0560b0f344ed69440a4d30654aca50b48b73"),
    "kserve.model_server.ModelServer._serve":
        ("LoopbackModelServer", "ff3ff3ccb85e49d37b7f6ab154780edb6f1c36f35b687b3305f24f3ef25e17f9"),
    "kserve.model_server.ModelServer.setup_event_loop":
        ("LoopbackModelServer", "7f1f9b173b0b122b7213c12669796b401c5208bfc460050933f9a3f01283d8c5"),
    "kserve.model_server.ModelServer.register_signal_handler":
        ("LoopbackModelServer", "47a1339a5fcf3d26b509a7d22d4611b0b4eba6c514bc8af9291bf98ccfed6e2e"),
}


async def _invalid_input(request, error: InvalidInput):
    """KServe's answer to a request it cannot serve (``{"error": ...}``) with the status the
    error names (413 for an image over the limits, 415 for a type the server does not decode,
    else 400) and one line in the log: KServe's own handler logs the client's mistake with the
    server's traceback."""
    status = getattr(error, "status_code", HTTPStatus.BAD_REQUEST)
    logger.warning("%s %s: %d %s", request.method, request.url.path, status, error.reason)
    return ORJSONResponse(status_code=status, content={"error": error.reason})


# No public hook: ModelServer builds its RESTServer inside start(), with no way to add ASGI
# middleware or exception handlers, and binds 0.0.0.0 itself (kserve#4558).
class GatedRESTServer(RESTServer):
    """KServe's REST server with :class:`RequestGate` in front, a request's mistakes answered
    with the status they name and logged in one line (:func:`_invalid_input`), and without
    KServe's per-request timing middleware unless an access log is asked for: it calls
    ``getrusage(RUSAGE_SELF)``, which walks every thread of the process, measured as the
    largest single cost per request here. Worker processes unpickle it and build the same
    application."""

    max_body_bytes = DEFAULT_MAX_BODY_BYTES

    def create_application(self):
        app = import_from_string(FASTAPI_APP)
        app.add_middleware(RequestGate, max_bytes=self.max_body_bytes)
        if self.access_log_format:
            self._add_middlewares(app)
        self._register_endpoints(app)
        self._add_exception_handlers(app)
        app.add_exception_handler(InvalidInput, _invalid_input)

    async def serve_on(self, sock: socket.socket):
        self.create_application()
        await self._server.serve(sockets=[sock])


# No public hook: GRPCServer.start() binds [::] with no host argument (kserve#4558).
class BoundGRPCServer(GRPCServer):
    """KServe's gRPC server on ``host`` (kserve 0.21 binds ``[::]``), reporting the port it
    got; KServe's per-call log line only with an access log."""

    def __init__(self, host: str, port: int, *args, on_bound, access_log: bool, **kwargs):
        super().__init__(port, *args, **kwargs)
        self._host = host
        self._on_bound = on_bound
        self._access_log = access_log

    async def start(self, max_workers):
        interceptors = [ExceptionToStatusInterceptor()]
        if self._access_log:
            interceptors.insert(0, LoggingInterceptor())
        self._server = aio.server(
            futures.ThreadPoolExecutor(max_workers=max_workers),
            interceptors=interceptors,
            options=[
                ("grpc.max_send_message_length",
                 self._kwargs.get("grpc_max_send_message_length")),
                ("grpc.max_receive_message_length",
                 self._kwargs.get("grpc_max_receive_message_length")),
                # gRPC's default SO_REUSEPORT would let a second server share a port in use.
                ("grpc.so_reuseport", 0),
            ],
        )
        grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
            InferenceServicer(self._data_plane, self._model_repository_extension), self._server)
        host = f"[{self._host}]" if ":" in self._host else self._host
        bound = self._server.add_insecure_port(f"{host}:{self._port}")
        if not bound:
            raise OSError(f"gRPC could not bind {host}:{self._port}")
        await self._server.start()
        self._on_bound(bound)
        await self._server.wait_for_termination()


# No public hook: RESTServerMultiProcess.__init__ binds its own socket on 0.0.0.0.
class PreboundMultiProcess(RESTServerMultiProcess):
    """KServe's multi-process REST server, on a socket bound beforehand."""

    def __init__(self, rest_server: GatedRESTServer, sock: socket.socket,
                 log_config_file: str | None):
        # KServe's __init__ would build a plain RESTServer and bind the socket itself.
        self.log_config_file = log_config_file
        self._rest_server = rest_server
        self._processes: list = []  # KServe's worker processes, as its __init__ starts them
        self.should_exit = asyncio.Event()
        self._socket = sock

    async def start(self) -> None:
        sockets = [self._socket]
        self.init_processes(sockets)
        while not self.should_exit.is_set():
            await asyncio.sleep(0.5)
            await self.keep_subprocess_alive(sockets)
        await self.terminate_all()


# No public hook: the data plane decodes a request before any Model method sees it, turning
# binary-extension tensors into Python lists (the largest cost of a 32-image request).
class BinaryDataPlane(DataPlane):
    """KServe's data plane, but binary-extension V2 requests keep their raw tensors
    (:func:`fmnist_kfp.serving.model_server.protocol.binary_infer_request`)."""

    def decode_inference_request(self, body, headers, model_name):
        if isinstance(body, bytes) and INFERENCE_CONTENT_LENGTH_HEADER in headers:
            return binary_infer_request(body, headers[INFERENCE_CONTENT_LENGTH_HEADER],
                                        model_name)
        return super().decode_inference_request(body, headers, model_name)


def _new_event_loop(event_loop: str) -> asyncio.AbstractEventLoop:
    """uvloop for the main process, as uvicorn gives each worker process of KServe's
    multi-process server (``uvicorn.Config.setup_event_loop``, ``loop="auto"``): KServe's
    single-process ``start()`` runs plain asyncio, whose socket transport was the largest
    single cost of a request here."""
    if event_loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


# No public hook: ModelServer.start() constructs the three servers above itself; this is its
# start() with ours in their place.
class LoopbackModelServer(ModelServer):
    """``ModelServer`` whose REST and gRPC servers bind ``host`` (kserve 0.21 always binds
    every interface), accept port 0, report the ports they got, and run ``workers`` REST
    processes (gRPC stays in the main one)."""

    http_port: int  # ModelServer's setting (0: any), then the port the socket got

    def __init__(self, host: str, *, max_body_bytes: int, access_log: bool,
                 port_file: str = "", **kwargs):
        super().__init__(**kwargs)
        self.dataplane = BinaryDataPlane(model_registry=self.registered_models)
        self.host = host
        self.max_body_bytes = max_body_bytes
        self.access_log = access_log
        self.port_file = port_file

    def start(self, models) -> None:
        self._register_and_check_atleast_one_model_is_ready(models)
        sock = bind_socket(self.host, self.http_port)
        self.http_port = sock.getsockname()[1]
        rest = GatedRESTServer(
            FASTAPI_APP, self.dataplane, self.model_repository_extension, self.http_port,
            access_log_format=self.access_log_format, workers=self.workers,
            grace_period=self.grace_period, event_loop=self.event_loop,
            timeout_keep_alive=self.timeout_keep_alive,
        )
        rest.max_body_bytes = self.max_body_bytes
        if self.workers > 1:
            self._rest_multiprocess_server = PreboundMultiProcess(
                rest, sock, kserve_model_server.args.log_config_file)
            self.servers.append(self._rest_multiprocess_server.start())
        else:
            self._rest_server = rest
            self.servers.append(rest.serve_on(sock))
        if self.enable_grpc:
            self._grpc_server = BoundGRPCServer(
                self.host, self.grpc_port, self.dataplane, self.model_repository_extension,
                kwargs=vars(kserve_model_server.args), grace_period=self.grace_period,
                on_bound=self._announce, access_log=self.access_log)
            self.servers.append(self._grpc_server.start(self.max_threads))
        else:
            self._announce(None)
        # KServe's start() configures one loop (get_event_loop) and then runs another
        # (asyncio.run); here the loop it configures is the one that runs.
        loop = _new_event_loop(self.event_loop)
        asyncio.set_event_loop(loop)
        self.setup_event_loop()
        self.register_signal_handler()
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    def _announce(self, grpc_port: int | None) -> None:
        grpc = f", gRPC {self.host}:{grpc_port}" if grpc_port else ""
        # Printed, not logged: the one line a person at `fmnist-kfp serve` needs, whatever
        # level KServe's logger is at.
        print(f"listening on http://{self.host}:{self.http_port}{grpc} ({self.workers} REST "
              f"worker{'s' if self.workers > 1 else ''})", flush=True)
        if self.port_file:
            write_port_file(self.port_file, self.http_port, grpc_port)
