"""Runs the predictor with KServe's own ``ModelServer``: REST (V1, V2) and gRPC (V2).

    python -m fmnist_kfp.serving.model_server.server --model_dir runs/.../best_model
        [--model_name fashion-mnist] [--host 127.0.0.1] [--http_port 8080] [--grpc_port 8081]
        [--workers 1] [--port_file ports.json] [--max_batch_size 32]
        [--max_batch_latency_ms 1] [--max_body_bytes 4194304]
        [--max_image_pixels 16777216] [--max_image_side 8192]

Both servers bind ``--host``, 127.0.0.1 unless told otherwise (the ServingRuntime passes
``--host=0.0.0.0`` inside the pod; kserve 0.21 itself always binds every interface). Port 0
asks for any free port; the server binds it itself and, with ``--port_file``, writes the ports it
got (``{"http_port": …, "grpc_port": …, "pid": …}``) once both listen, so a caller never races
another process for a port it picked. The same flags run on a cluster, where KServe's storage
initializer puts the model in ``/mnt/models``. ``--model_name``, the batching flags and
``--uncertain_margin`` take their defaults and help from the settings
(:mod:`fmnist_kfp.settings.serving`).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import threading
import time
import warnings

from kserve.logging import logger

from fmnist_kfp.serving.model_server.kserve_internals import LoopbackModelServer
from fmnist_kfp.serving.model_server.ports import PortInUse, check_ports
from fmnist_kfp.serving.model_server.request_gate import DEFAULT_MAX_BODY_BYTES
from fmnist_kfp.settings.schema import Settings
from fmnist_kfp.settings.serving import DeploySettings, ServingSettings
from fmnist_kfp.training.quiet_start import import_tensorflow_quietly

DEFAULT_GRPC_PORT = 8081
# The flags that are settings: each takes the setting's default and help.
SETTING_FLAGS: dict[str, type[Settings]] = {
    "model_name": DeploySettings, "max_batch_size": ServingSettings,
    "max_batch_latency_ms": ServingSettings, "uncertain_margin": ServingSettings}
PROGRESS_SECONDS = 30.0


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


def _setting_flag(parser: argparse.ArgumentParser, name: str) -> None:
    """``--<name>`` with the type, default and help of the setting ``name``."""
    spec = SETTING_FLAGS[name].specs()[name]
    parser.add_argument(f"--{name}", type=spec.kind, default=spec.default,
                        help=spec.setting.help.replace("%", "%%"))


def build_parser() -> argparse.ArgumentParser:
    from fmnist_kfp.images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_IMAGE_SIDE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", required=False, default=os.environ.get("MODEL_DIR", ""))
    _setting_flag(parser, "model_name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http_port", type=int, default=8080, help="0: any free port")
    parser.add_argument("--grpc_port", type=int, default=DEFAULT_GRPC_PORT,
                        help="V2 gRPC port (0: any free port)")
    parser.add_argument("--no_grpc", action="store_true", help="serve REST only")
    parser.add_argument("--workers", type=int, default=1,
                        help="REST worker processes (KServe's multi-process server)")
    parser.add_argument("--port_file", default="",
                        help="write the bound ports here as JSON once listening")
    _setting_flag(parser, "max_batch_size")
    _setting_flag(parser, "max_batch_latency_ms")
    parser.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--max_instances", type=int, default=256)
    parser.add_argument("--max_image_pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS,
                        help="most pixels an image may declare (checked before decoding)")
    parser.add_argument("--max_image_side", type=int, default=DEFAULT_MAX_IMAGE_SIDE,
                        help="longest side an image may declare (checked before decoding)")
    _setting_flag(parser, "uncertain_margin")
    parser.add_argument("--access_log", action="store_true", help="log every request")
    parser.add_argument("--no_fast_path", action="store_true",
                        help="run the model in TensorFlow, not LiteRT")
    return parser


def checked_limits(args: argparse.Namespace):
    """The image limits of ``args``; exits naming the flag when a flag any model server takes is
    out of range."""
    from fmnist_kfp.images import ImageLimits

    try:
        limits = ImageLimits(args.max_image_pixels, args.max_image_side)
    except ValueError as error:
        sys.exit(f"error: {error}")
    if not 0 <= args.uncertain_margin <= 1:
        sys.exit(f"error: --uncertain_margin must be in [0, 1], got {args.uncertain_margin:g}")
    if args.workers < 1:
        sys.exit(f"error: --workers must be at least 1, got {args.workers}")
    return limits


def serve(args: argparse.Namespace) -> None:
    from fmnist_kfp.serving.model_server.predictor import FashionMnistModel

    limits = checked_limits(args)
    if not args.model_dir:
        sys.exit("--model_dir is required: the directory the training step exported")
    if args.workers > 1 and args.no_fast_path:
        sys.exit("error: --workers > 1 serves the LiteRT model; drop --no_fast_path")
    model = FashionMnistModel(
        args.model_name, args.model_dir, max_batch_size=args.max_batch_size,
        max_batch_latency_ms=args.max_batch_latency_ms, max_instances=args.max_instances,
        fast_path=not args.no_fast_path, image_limits=limits,
        uncertain_margin=args.uncertain_margin,
    )
    start(model, args)


def start(model, args: argparse.Namespace, *, report_progress: bool = True) -> None:
    """Loads ``model`` and serves it as ``args`` say until the server stops;
    ``report_progress``: log what was served every ``PROGRESS_SECONDS`` (a model with a
    batcher)."""
    try:
        check_ports(args.host, args.http_port, None if args.no_grpc else args.grpc_port)
    except PortInUse as error:
        sys.exit(f"error: {error}")
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
    if report_progress:
        threading.Thread(target=_report_progress, args=(model, PROGRESS_SECONDS),
                         daemon=True, name="progress").start()
        logger.info("serving %s from %s", args.model_name, model.saved_model_dir)
    server.start([model])


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args, _ = build_parser().parse_known_args(argv)
    # The server's own log, not TensorFlow's start-up lines about a GPU this machine lacks, nor
    # a deprecation inside KServe's FastAPI app that no user of it can act on.
    import_tensorflow_quietly()
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    serve(args)


if __name__ == "__main__":
    # Through the importable module, so that worker processes unpickle its classes by name.
    from fmnist_kfp.serving.model_server.server import main as module_main

    module_main()
