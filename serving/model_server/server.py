"""Runs the predictor with KServe's own ``ModelServer``: REST (V1, V2) and gRPC (V2).

    python -m serving.model_server.server --model_dir runs/.../best_model
        [--model_name fashion-mnist] [--host 127.0.0.1] [--http_port 8080] [--grpc_port 8081]
        [--workers 1] [--port_file ports.json] [--max_batch_size 32]
        [--max_batch_latency_ms 1] [--max_body_bytes 4194304]
        [--max_image_pixels 16777216] [--max_image_side 8192]

Both servers bind ``--host``, 127.0.0.1 unless told otherwise (the ServingRuntime passes
``--host=0.0.0.0`` inside the pod; kserve 0.21 itself always binds every interface). Port 0
asks for any free port; the server binds it itself and, with ``--port_file``, writes the ports it
got (``{"http_port": …, "grpc_port": …, "pid": …}``) once both listen, so a caller never races
another process for a port it picked. The same flags run on a cluster, where KServe's storage
initializer puts the model in ``/mnt/models``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket
import sys
import threading
import time
from concurrent import futures

from fastapi.responses import ORJSONResponse
from grpc import aio
from kserve import ModelServer
from kserve import model_server as kserve_model_server
from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER
from kserve.logging import logger
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor, LoggingInterceptor
from kserve.protocol.grpc.server import GRPCServer
from kserve.protocol.grpc.servicer import InferenceServicer
from kserve.protocol.rest.multiprocess.server import RESTServerMultiProcess
from kserve.protocol.rest.server import RESTServer
from uvicorn.importer import import_from_string

from fmnist.images import ImageTooLarge
from serving.model_server.ports import write_port_file
from serving.model_server.protocol import binary_infer_request

DEFAULT_MODEL_NAME = "fashion-mnist"
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_GRPC_PORT = 8081
PROGRESS_SECONDS = 30.0
FASTAPI_APP = "kserve.model_server:app"
_INFER_SUFFIX = b"/infer"
_BINARY_HEADER = b"inference-header-content-length"


class RequestGate:
    """ASGI middleware in front of KServe's routes, for two things KServe leaves to us.

    * A body over ``max_bytes`` gets a 413 before the model sees it (on the declared length,
      and on what actually arrives: chunked bodies declare none).
    * A V2 ``/infer`` POST without a Content-Type is JSON unless it carries the binary
      extension's ``Inference-Header-Content-Length``: the protocol says so, and that is what
      tritonclient sends in JSON mode. FastAPI >= 0.132 (strict Content-Type) hands such a body
      to KServe as bytes, and KServe 0.21 then answers 400 (fastapi ``routing.py`` L471–488,
      kserve 0.21 ``protocol/dataplane.py`` L393–403), so the header is filled in here.
    """

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, send, size_hint: str) -> None:
        import orjson

        body = orjson.dumps({"error": (
            f"request body {size_hint}exceeds the {self.max_bytes}-byte limit; send fewer or "
            "smaller images per request, or raise --max_body_bytes")})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        has_type = binary = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    return await self._reject(send, f"of {declared} bytes ")
            elif name == b"content-type":
                has_type = True
            elif name == _BINARY_HEADER:
                binary = True
        if (not has_type and not binary and scope["method"] == "POST"
                and scope["path"].encode().endswith(_INFER_SUFFIX)):
            scope = {**scope, "headers": [*scope["headers"],
                                          (b"content-type", b"application/json")]}
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._reject(send, "")
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port), bound here so the server,
    not its caller, owns the port from the start."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it a response waits for the client's delayed ACK (40 ms here).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


async def _image_too_large(request, error: ImageTooLarge):
    return ORJSONResponse(status_code=413, content={"error": error.reason})


class GatedRESTServer(RESTServer):
    """KServe's REST server with :class:`RequestGate` in front, 413 for images over the
    limits, and without KServe's per-request timing middleware unless an access log is asked
    for: it calls ``getrusage(RUSAGE_SELF)``, which walks every thread of the process, measured
    as the largest single cost per request here. Worker processes unpickle it and build the
    same application."""

    max_body_bytes = DEFAULT_MAX_BODY_BYTES

    def create_application(self):
        app = import_from_string(FASTAPI_APP)
        app.add_middleware(RequestGate, max_bytes=self.max_body_bytes)
        if self.access_log_format:
            self._add_middlewares(app)
        self._register_endpoints(app)
        self._add_exception_handlers(app)
        app.add_exception_handler(ImageTooLarge, _image_too_large)

    async def serve_on(self, sock: socket.socket):
        self.create_application()
        await self._server.serve(sockets=[sock])


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


class PreboundMultiProcess(RESTServerMultiProcess):
    """KServe's multi-process REST server, on a socket bound beforehand."""

    def __init__(self, rest_server: GatedRESTServer, sock: socket.socket,
                 log_config_file: str | None):
        # KServe's __init__ would build a plain RESTServer and bind the socket itself.
        self.log_config_file = log_config_file
        self._rest_server = rest_server
        self._processes = []
        self.should_exit = asyncio.Event()
        self._socket = sock

    async def start(self) -> None:
        sockets = [self._socket]
        self.init_processes(sockets)
        while not self.should_exit.is_set():
            await asyncio.sleep(0.5)
            await self.keep_subprocess_alive(sockets)
        await self.terminate_all()


class BinaryDataPlane(DataPlane):
    """KServe's data plane, but binary-extension V2 requests keep their raw tensors
    (:func:`serving.model_server.protocol.binary_infer_request`)."""

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


class LoopbackModelServer(ModelServer):
    """``ModelServer`` whose REST and gRPC servers bind ``host`` (kserve 0.21 always binds
    every interface), accept port 0, report the ports they got, and run ``workers`` REST
    processes (gRPC stays in the main one)."""

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
        logger.info("listening on http://%s:%d%s (%d REST worker%s)", self.host, self.http_port,
                    grpc, self.workers, "s" if self.workers > 1 else "")
        if self.port_file:
            write_port_file(self.port_file, self.http_port, grpc_port)


def _report_progress(model, interval: float) -> None:
    """Logs what was served since the last report, so a long-running server shows progress."""
    last = 0
    while True:
        time.sleep(interval)
        stats = model.batcher.stats.as_dict()
        if stats["requests"] != last:
            logger.info("served %d requests (%d new) in %d batches, mean batch %.1f",
                        stats["requests"], stats["requests"] - last, stats["batches"],
                        stats["mean_batch_size"])
            last = stats["requests"]


def build_parser() -> argparse.ArgumentParser:
    from fmnist.images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_IMAGE_SIDE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", required=False, default=os.environ.get("MODEL_DIR", ""))
    parser.add_argument("--model_name", default=DEFAULT_MODEL_NAME)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http_port", type=int, default=8080, help="0: any free port")
    parser.add_argument("--grpc_port", type=int, default=DEFAULT_GRPC_PORT,
                        help="V2 gRPC port (0: any free port)")
    parser.add_argument("--no_grpc", action="store_true", help="serve REST only")
    parser.add_argument("--workers", type=int, default=1,
                        help="REST worker processes (KServe's multi-process server)")
    parser.add_argument("--port_file", default="",
                        help="write the bound ports here as JSON once listening")
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--max_batch_latency_ms", type=float, default=1.0)
    parser.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--max_instances", type=int, default=256)
    parser.add_argument("--max_image_pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS,
                        help="most pixels an image may declare (checked before decoding)")
    parser.add_argument("--max_image_side", type=int, default=DEFAULT_MAX_IMAGE_SIDE,
                        help="longest side an image may declare (checked before decoding)")
    parser.add_argument("--access_log", action="store_true", help="log every request")
    parser.add_argument("--no_fast_path", action="store_true",
                        help="run the model in TensorFlow, not LiteRT")
    parser.add_argument("--noop", choices=("model", "bare"), default="",
                        help="benchmark baselines instead of --model_dir: 'model' parses and "
                             "decodes requests and answers a constant, 'bare' ignores the "
                             "request too")
    return parser


def serve(args: argparse.Namespace) -> None:
    from fmnist.images import ImageLimits
    from serving.model_server.predictor import BareNoOpModel, FashionMnistModel, NoOpModel

    try:
        limits = ImageLimits(args.max_image_pixels, args.max_image_side)
    except ValueError as error:
        sys.exit(f"error: {error}")
    if args.workers < 1:
        sys.exit(f"error: --workers must be at least 1, got {args.workers}")
    if args.noop:
        baseline = NoOpModel if args.noop == "model" else BareNoOpModel
        model = baseline(args.model_name, max_instances=args.max_instances, image_limits=limits)
    else:
        if not args.model_dir:
            sys.exit("--model_dir is required: the directory the training step exported")
        if args.workers > 1 and args.no_fast_path:
            sys.exit("error: --workers > 1 serves the LiteRT model; drop --no_fast_path")
        model = FashionMnistModel(
            args.model_name, args.model_dir, max_batch_size=args.max_batch_size,
            max_batch_latency_ms=args.max_batch_latency_ms, max_instances=args.max_instances,
            fast_path=not args.no_fast_path, image_limits=limits,
        )
    model.load()
    # Long-lived objects (TensorFlow's, when loaded) stay: keep the collector from walking them.
    gc.collect()
    gc.freeze()
    server = LoopbackModelServer(
        args.host, max_body_bytes=args.max_body_bytes, access_log=args.access_log,
        port_file=args.port_file, http_port=args.http_port, grpc_port=args.grpc_port,
        enable_grpc=not args.no_grpc, workers=args.workers, enable_latency_logging=False)
    if not args.access_log:
        logging.getLogger("uvicorn.access").disabled = True
    if not args.noop:
        threading.Thread(target=_report_progress, args=(model, PROGRESS_SECONDS),
                         daemon=True, name="progress").start()
        logger.info("serving %s from %s", args.model_name, model.saved_model_dir)
    server.start([model])


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args, _ = build_parser().parse_known_args(argv)
    serve(args)


if __name__ == "__main__":
    # Through the importable module, so that worker processes unpickle its classes by name.
    from serving.model_server.server import main as module_main

    module_main()
