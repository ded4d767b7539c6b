"""Runs the predictor with KServe's own ``ModelServer``.

    python -m serving.model_server.server --model_dir runs/.../best_model
        [--model_name fashion-mnist]
        [--host 127.0.0.1] [--http_port 8080] [--max_batch_size 32]
        [--max_batch_latency_ms 2] [--max_body_bytes 4194304]

Local runs bind 127.0.0.1; the ServingRuntime passes ``--host=0.0.0.0`` inside the pod.
The same flags run on a cluster, where KServe's storage initializer puts the model in
``/mnt/models``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import threading
import time

DEFAULT_MODEL_NAME = "fashion-mnist"
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
PROGRESS_SECONDS = 30.0



class BodySizeLimit:
    """ASGI middleware: a body over ``max_bytes`` gets a 413 before the model sees it."""

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
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    return await self._reject(send, f"of {declared} bytes ")
        # Count what actually arrives too (chunked bodies declare no length).
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


def _model_server_class():
    from kserve import ModelServer

    class LoopbackModelServer(ModelServer):
        """``ModelServer`` listening on ``host`` (kserve 0.21 always binds 0.0.0.0)."""

        def __init__(self, host: str, **kwargs):
            super().__init__(**kwargs)
            self.host = host

        def setup_event_loop(self):
            # Called by start() after the REST server is built and before it listens.
            rest_server = self._rest_server
            if rest_server is not None:
                rest_server.config.host = self.host
                if not rest_server.access_log_format:
                    # KServe's only other middleware times every request for a trace log with
                    # getrusage(RUSAGE_SELF), which walks all of TensorFlow's threads: measured
                    # as the largest single cost per request here.
                    rest_server._add_middlewares = lambda app: None
            super().setup_event_loop()

    return LoopbackModelServer


def _report_progress(model, interval: float) -> None:
    """Logs what was served since the last report, so a long-running server shows progress."""
    from kserve.logging import logger

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", required=False, default=os.environ.get("MODEL_DIR", ""))
    parser.add_argument("--model_name", default=DEFAULT_MODEL_NAME)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http_port", type=int, default=8080)
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--max_batch_latency_ms", type=float, default=1.0)
    parser.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--max_instances", type=int, default=256)
    parser.add_argument("--access_log", action="store_true", help="log every request")
    parser.add_argument("--no_fast_path", action="store_true",
                        help="run every request through TensorFlow, not TensorFlow Lite")
    parser.add_argument("--noop", choices=("model", "bare"), default="",
                        help="benchmark baselines instead of --model_dir: 'model' parses requests "
                             "and answers a constant, 'bare' ignores the request too")
    return parser


def serve(args: argparse.Namespace) -> None:
    from kserve import model_server as kserve_model_server

    from serving.model_server.predictor import BareNoOpModel, FashionMnistModel, NoOpModel

    if args.noop:
        baseline = NoOpModel if args.noop == "model" else BareNoOpModel
        model = baseline(args.model_name, max_instances=args.max_instances)
    else:
        if not args.model_dir:
            sys.exit("--model_dir is required: the directory the training step exported")
        model = FashionMnistModel(
            args.model_name, args.model_dir, max_batch_size=args.max_batch_size,
            max_batch_latency_ms=args.max_batch_latency_ms, max_instances=args.max_instances,
            fast_path=not args.no_fast_path,
        )
    model.load()
    # TensorFlow's objects live as long as the server: keep the collector from walking them.
    gc.collect()
    gc.freeze()
    kserve_model_server.app.add_middleware(BodySizeLimit, max_bytes=args.max_body_bytes)
    server = _model_server_class()(
        host=args.host, http_port=args.http_port, enable_grpc=False,
        enable_latency_logging=False, workers=1,
    )
    if not args.access_log:
        logging.getLogger("uvicorn.access").disabled = True
    if not args.noop:
        threading.Thread(target=_report_progress, args=(model, PROGRESS_SECONDS),
                         daemon=True, name="progress").start()
        from kserve.logging import logger

        logger.info("serving %s from %s on http://%s:%d", args.model_name,
                    model.saved_model_dir, args.host, args.http_port)
    server.start([model])


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args, _ = build_parser().parse_known_args(argv)
    serve(args)


if __name__ == "__main__":
    main()
