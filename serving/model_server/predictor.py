"""The Fashion-MNIST predictor: a ``kserve.Model`` over the exported SavedModel.

It answers KServe's V1 and V2 endpoints, REST and gRPC (see
:mod:`fmnist_kfp.serving.model_server.protocol` for the request shapes, and the V2 metadata), with
one model call per batch of concurrent instances (:mod:`fmnist_kfp.serving.model_server.batching`).

One path for every request: images of any supported format are decoded to 28×28 pixels in
Python (:mod:`fmnist_kfp.images`, the same pixels the SavedModel's ``serving_default``
graph makes), and pixels run through the SavedModel's ``serving_pixels`` signature converted at
load time to a LiteRT (TensorFlow Lite) model, run by ``ai-edge-litert``'s interpreter. A
TensorFlow function call costs 0.4–0.6 ms of CPU here whatever the batch; the interpreter runs
one image in 0.03 ms and 32 in 0.9 ms. The conversion is checked against the SavedModel at load
and dropped if the two disagree; ``--no_fast_path`` runs the SavedModel's signature instead.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InferenceError, InvalidInput
from kserve.protocol.infer_type import InferRequest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.images import (
    INLINE_DECODE_PIXELS,
    ImageLimits,
    OpenedImage,
    to_model_pixels,
)
from fmnist_kfp.serving.model_server.batching import AdaptiveBatcher
from fmnist_kfp.serving.model_server.protocol import (
    DEFAULT_UNCERTAIN_MARGIN,
    PIXELS,
    V2_INPUTS,
    V2_OUTPUTS,
    ParsedRequest,
    Predictions,
    parse_v1,
    parse_v2,
    v1_response,
    v2_response,
)
from fmnist_kfp.settings.serving import ServingSettings

DEFAULT_MAX_INSTANCES = 256
# The batching defaults are the serving settings' (fmnist_kfp.settings.serving).
DEFAULT_MAX_BATCH_SIZE = ServingSettings().max_batch_size
DEFAULT_MAX_BATCH_LATENCY_MS = ServingSettings().max_batch_latency_ms
# How far the converted model's probabilities may be from the SavedModel's (float32 rounding).
FAST_PATH_TOLERANCE = 1e-4


def resolve_saved_model_dir(model_dir: str) -> str:
    """The SavedModel in ``model_dir``: the directory itself, or its highest numbered version
    (TF Serving's layout, ``<model>/1/saved_model.pb``, which is what training exports)."""
    import tensorflow as tf

    if tf.io.gfile.exists(os.path.join(model_dir, "saved_model.pb")):
        return model_dir
    if tf.io.gfile.isdir(model_dir):
        versions = [entry.rstrip("/") for entry in tf.io.gfile.listdir(model_dir)]
        numbered = sorted((int(v) for v in versions if v.isdigit()), reverse=True)
        for version in numbered:
            candidate = os.path.join(model_dir, str(version))
            if tf.io.gfile.exists(os.path.join(candidate, "saved_model.pb")):
                return candidate
    raise UserInputError(
        f"no SavedModel in {model_dir}: expected saved_model.pb there or in a numbered version "
        "directory such as 1/; pass the model directory the training step exported"
    )


class LiteRunner:
    """A LiteRT signature with one interpreter per batch size.

    Resizing an interpreter's input re-plans its tensors and the XNNPACK delegate on the next
    call; under adaptive batching the batch size changes from call to call, so each size gets
    an interpreter of its own, made on first use (at most ``max_batch_size``, under 1 MB each)
    and never resized again. Calls go through the interpreter's tensors directly: the
    signature runner's per-call checks cost more than the model at small batches.

    Only the model bytes are pickled: a server worker process builds its own interpreters
    (and never imports TensorFlow).
    """

    def __init__(self, model_content: bytes, signature_key: str, max_batch_size: int,
                 num_threads: int = 1):
        self.model_content = model_content
        self.signature_key = signature_key
        self.max_batch_size = max_batch_size
        # One thread: a second halves a batch of 32's wall time (0.48 vs 0.93 ms) but costs
        # more CPU (XNNPACK's workers spin: 59 vs 33 µs for one image), and under load the
        # server is CPU-bound, with the HTTP stack, other workers and the clients sharing the
        # cores.
        self.num_threads = num_threads
        self._runners: dict[int, Any] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_runners": {}}

    def _make(self, batch_size: int):
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_content=self.model_content,
                                  num_threads=self.num_threads)
        signature = interpreter.get_signature_runner(self.signature_key)
        pixels = signature.get_input_details()["pixels"]
        outputs = {name: detail["index"]
                   for name, detail in signature.get_output_details().items()}
        del signature  # it holds views of the tensors, which resizing would invalidate
        interpreter.resize_tensor_input(pixels["index"], [batch_size, *pixels["shape"][1:]],
                                        strict=False)
        interpreter.allocate_tensors()
        pixels = pixels["index"]

        def run(batch: np.ndarray) -> dict[str, np.ndarray]:
            interpreter.set_tensor(pixels, batch)
            interpreter.invoke()
            return {name: interpreter.get_tensor(index) for name, index in outputs.items()}

        return run

    def __call__(self, pixels: np.ndarray) -> dict[str, np.ndarray]:
        batch_size = len(pixels)
        runner = self._runners.get(batch_size)
        if runner is None:
            runner = self._make(batch_size)
            if batch_size <= self.max_batch_size:  # larger ones (load-time probes) are kept out
                self._runners[batch_size] = runner
        return runner(np.ascontiguousarray(pixels, dtype=np.float32))


class ProtocolModel(Model):
    """Parsing, decoding, formatting and metadata of our protocol, for any model behind it:
    the predictor's, and the benchmark's baselines (``bench/noop_server.py``)."""

    def __init__(self, name: str, max_instances: int = DEFAULT_MAX_INSTANCES,
                 image_limits: ImageLimits | None = None,
                 uncertain_margin: float = DEFAULT_UNCERTAIN_MARGIN):
        super().__init__(name)
        self.max_instances = max_instances
        self.image_limits = image_limits or ImageLimits()
        self.uncertain_margin = uncertain_margin

    async def preprocess(self, payload: dict | InferRequest | bytes,
                         headers: dict[str, str] | None = None) -> ParsedRequest:
        if isinstance(payload, InferRequest):
            request = parse_v2(payload, self.max_instances, self.image_limits)
        else:
            request = parse_v1(payload, self.max_instances, self.image_limits)
        await decode_images(request)
        return request

    async def postprocess(self, result: tuple[ParsedRequest, Predictions],
                          headers: dict[str, str] | None = None) -> Any:
        request, predictions = result
        if request.protocol == "v2":
            return v2_response(self.name, request, predictions, self.uncertain_margin)
        return v1_response(predictions, self.uncertain_margin)

    def get_input_types(self) -> list[dict]:
        return [dict(tensor) for tensor in V2_INPUTS]

    def get_output_types(self) -> list[dict]:
        return [dict(tensor) for tensor in V2_OUTPUTS]


async def decode_images(request: ParsedRequest) -> None:
    """Decodes the request's images to pixels in place: small ones here, large ones on a
    worker thread (Pillow releases the GIL while it decodes), so the event loop keeps serving."""
    for index, item in enumerate(request.items):
        if isinstance(item, OpenedImage):
            if item.pixels <= INLINE_DECODE_PIXELS:
                request.items[index] = to_model_pixels(item)
            else:
                request.items[index] = await asyncio.to_thread(to_model_pixels, item)


class FashionMnistModel(ProtocolModel):
    """Serves an exported Fashion-MNIST SavedModel with adaptive batching."""

    def __init__(self, name: str, model_dir: str, *,
                 max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 max_batch_latency_ms: float = DEFAULT_MAX_BATCH_LATENCY_MS,
                 max_instances: int = DEFAULT_MAX_INSTANCES, fast_path: bool = True,
                 image_limits: ImageLimits | None = None,
                 uncertain_margin: float = DEFAULT_UNCERTAIN_MARGIN):
        super().__init__(name, max_instances, image_limits, uncertain_margin)
        self.model_dir = model_dir
        self.saved_model_dir = ""
        self.fast_path = fast_path
        self.batcher = AdaptiveBatcher(self._run_batch, max_batch_size, max_batch_latency_ms)
        self._signature: Any = None  # the SavedModel's serving signature (untyped TensorFlow)
        self._lite_runner: LiteRunner | None = None

    def __getstate__(self) -> dict:
        """What a server worker process gets: the LiteRT model, not TensorFlow's objects."""
        if self._lite_runner is None:
            raise RuntimeError("only the LiteRT fast path can be served by several workers; "
                               "drop --no_fast_path or use --workers=1")
        return {**self.__dict__, "_signature": None, "_loaded": None}

    def load(self) -> bool:
        import tensorflow as tf

        from fmnist_kfp.training.export import PIXELS_SIGNATURE

        self.saved_model_dir = resolve_saved_model_dir(self.model_dir)
        try:
            loaded = tf.saved_model.load(self.saved_model_dir)
        except (OSError, ValueError) as error:  # a truncated or foreign saved_model.pb
            raise UserInputError(
                f"cannot load the SavedModel in {self.saved_model_dir}: {error}; pass the model "
                "directory the training step exported") from None
        self._loaded = loaded  # keeps the signature's variables alive
        self._signature = loaded.signatures[PIXELS_SIGNATURE]
        if self.fast_path:
            self._lite_runner = self._convert_to_lite(PIXELS_SIGNATURE)
            if self._lite_runner is not None:
                self.batcher.inline_kinds = (PIXELS,)  # 0.03 ms an image: no thread hop
        # Trace the path now, not on the first request.
        self._run_batch(PIXELS, [np.zeros((28, 28), np.float32)])
        self.ready = True
        return self.ready

    def _convert_to_lite(self, signature_key: str) -> LiteRunner | None:
        """The pixels signature as a LiteRT model, if it answers like the SavedModel."""
        import logging
        import warnings

        import tensorflow as tf

        log = logging.getLogger("kserve")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converter = tf.lite.TFLiteConverter.from_saved_model(
                self.saved_model_dir, signature_keys=[signature_key])
            runner = LiteRunner(converter.convert(), signature_key,
                                self.batcher.max_batch_size)
        probe = np.random.default_rng(0).uniform(0, 255, (64, 28, 28)).astype(np.float32)
        expected = self._signature(pixels=tf.constant(probe))["probabilities"]
        difference = float(np.max(np.abs(runner(probe)["probabilities"] - expected.numpy())))
        if difference > FAST_PATH_TOLERANCE:
            log.warning("LiteRT answers differ from the SavedModel by %.2g; serving every "
                        "request through TensorFlow", difference)
            return None
        log.info("fast path: LiteRT agrees with the SavedModel to %.1g", difference)
        return runner

    def _run_batch(self, kind: str, values: Sequence[np.ndarray]) -> list[tuple]:
        batch = np.stack(values)
        if self._lite_runner is not None:
            outputs = self._lite_runner(batch)
        else:
            import tensorflow as tf

            outputs = {key: value.numpy() for key, value in
                       self._signature(pixels=tf.constant(batch, tf.float32)).items()}
        return list(zip(outputs["probabilities"], outputs["class_index"],
                        [name.decode() for name in outputs["class_name"]], strict=True))

    async def predict(self, request: ParsedRequest,
                      headers: dict[str, str] | None = None) -> tuple[ParsedRequest, Predictions]:
        results = await self.batcher.submit([(PIXELS, pixels) for pixels in request.items])
        for index, result in enumerate(results):
            if isinstance(result, InvalidInput):
                raise InvalidInput(f"instance {index}: {result.reason}")
            if isinstance(result, BaseException):
                raise InferenceError(f"instance {index}: {result}")
        return request, Predictions(
            probabilities=np.stack([r[0] for r in results]),
            class_index=np.array([r[1] for r in results]),
            class_name=[r[2] for r in results],
        )

    def stop(self) -> None:
        self.batcher.close()
