"""The Fashion-MNIST predictor: a ``kserve.Model`` over the exported SavedModel.

It answers KServe's V1 and V2 endpoints (see :mod:`serving.model_server.protocol` for the
request shapes) with one model call per batch of concurrent instances
(:mod:`serving.model_server.batching`).

Two paths through the same exported model:

* 28×28 grayscale pixels (raw arrays, or PNG/BMP images of the dataset's own format, decoded
  losslessly) run through the SavedModel's ``serving_pixels`` signature converted at load time
  to TensorFlow Lite. A TensorFlow function call costs about 1.5 ms of CPU here whatever the
  batch; the interpreter runs a batch of 5 in 0.4 ms. The conversion is checked against the
  SavedModel at load and dropped if the two disagree (``--no_fast_path`` skips it).
* Any other image (JPEG, colour, other sizes) goes through the SavedModel's
  ``serving_default`` graph, the one TF Serving runs, which decodes, converts and resizes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InferenceError, InvalidInput
from kserve.protocol.infer_type import InferRequest

from serving.model_server.batching import AdaptiveBatcher
from serving.model_server.protocol import (
    IMAGE_BYTES,
    ParsedRequest,
    Predictions,
    parse_v1,
    parse_v2,
    v1_response,
    v2_response,
)

DEFAULT_MAX_INSTANCES = 256
PIXELS = "pixels"
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
    raise FileNotFoundError(
        f"no SavedModel in {model_dir}: expected saved_model.pb there or in a numbered version "
        "directory such as 1/; pass the model directory the training step exported"
    )


class LiteRunner:
    """A TensorFlow Lite signature with one interpreter per batch size.

    Resizing an interpreter's input re-plans its tensors and the XNNPACK delegate on the next
    call; under adaptive batching the batch size changes from call to call, so each size gets
    an interpreter of its own, made on first use (at most ``max_batch_size``, under 1 MB each)
    and never resized again.
    """

    def __init__(self, model_content: bytes, signature_key: str, max_batch_size: int):
        self.model_content = model_content
        self.signature_key = signature_key
        self.max_batch_size = max_batch_size
        # Two threads halve a batch's time here (0.3 vs 0.5 ms for five); the call runs on
        # the event loop, so the sooner it is done the better. More buy little and pods
        # often get one or two cores whatever the node has.
        self.num_threads = min(2, len(os.sched_getaffinity(0)))
        self._runners: dict[int, Any] = {}

    def _runner(self, batch_size: int):
        runner = self._runners.get(batch_size)
        if runner is None:
            import tensorflow as tf

            interpreter = tf.lite.Interpreter(model_content=self.model_content,
                                              num_threads=self.num_threads)
            runner = interpreter.get_signature_runner(self.signature_key)
            if batch_size <= self.max_batch_size:  # larger ones (load-time probes) are kept out
                self._runners[batch_size] = runner
        return runner

    def __call__(self, pixels: np.ndarray) -> dict[str, np.ndarray]:
        return self._runner(len(pixels))(pixels=pixels)


class _ProtocolModel(Model):
    """Parsing and formatting shared by the real predictor and the benchmark's no-op one."""

    def __init__(self, name: str, max_instances: int = DEFAULT_MAX_INSTANCES):
        super().__init__(name)
        self.max_instances = max_instances

    async def preprocess(self, payload: dict | InferRequest | bytes,
                         headers: dict[str, str] | None = None) -> ParsedRequest:
        if isinstance(payload, InferRequest):
            return parse_v2(payload, self.max_instances)
        return parse_v1(payload, self.max_instances)

    async def postprocess(self, result: tuple[ParsedRequest, Predictions],
                          headers: dict[str, str] | None = None) -> Any:
        request, predictions = result
        if request.protocol == "v2":
            return v2_response(self.name, request.request_id, predictions)
        return v1_response(predictions)


class FashionMnistModel(_ProtocolModel):
    """Serves an exported Fashion-MNIST SavedModel with adaptive batching."""

    def __init__(self, name: str, model_dir: str, *, max_batch_size: int = 32,
                 max_batch_latency_ms: float = 1.0,
                 max_instances: int = DEFAULT_MAX_INSTANCES, fast_path: bool = True):
        super().__init__(name, max_instances)
        self.model_dir = model_dir
        self.saved_model_dir = ""
        self.fast_path = fast_path
        self.batcher = AdaptiveBatcher(self._run_batch, max_batch_size, max_batch_latency_ms)
        self._signatures: dict[str, Any] = {}
        self._lite_runner = None

    def load(self) -> bool:
        import tensorflow as tf

        from fmnist.training.export import BYTES_SIGNATURE, PIXELS_SIGNATURE

        self.saved_model_dir = resolve_saved_model_dir(self.model_dir)
        loaded = tf.saved_model.load(self.saved_model_dir)
        self._loaded = loaded  # keeps the signatures' variables alive
        self._signatures = {
            IMAGE_BYTES: (loaded.signatures[BYTES_SIGNATURE], "image_bytes", tf.string),
            PIXELS: (loaded.signatures[PIXELS_SIGNATURE], "pixels", tf.float32),
        }
        if self.fast_path:
            self._lite_runner = self._convert_to_lite(PIXELS_SIGNATURE)
            if self._lite_runner is not None:
                self.batcher.inline_kinds = (PIXELS,)  # 0.1 ms: not worth a thread hop
        # Trace both paths now, not on the first request.
        self._run_batch(PIXELS, [np.zeros((28, 28), np.float32)])
        self.ready = True
        return self.ready

    def _convert_to_lite(self, signature_key: str) -> LiteRunner | None:
        """The pixels signature as TensorFlow Lite, if it answers like the SavedModel."""
        import logging
        import warnings

        import tensorflow as tf

        log = logging.getLogger("kserve")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tf.lite's notice about its LiteRT successor
            converter = tf.lite.TFLiteConverter.from_saved_model(
                self.saved_model_dir, signature_keys=[signature_key])
            runner = LiteRunner(converter.convert(), signature_key,
                                self.batcher.max_batch_size)
        probe = np.random.default_rng(0).uniform(0, 255, (64, 28, 28)).astype(np.float32)
        expected = self._signatures[PIXELS][0](pixels=tf.constant(probe))["probabilities"]
        difference = float(np.max(np.abs(runner(probe)["probabilities"] - expected.numpy())))
        if difference > FAST_PATH_TOLERANCE:
            log.warning("TensorFlow Lite answers differ from the SavedModel by %.2g; serving "
                        "every request through TensorFlow", difference)
            return None
        log.info("fast path: TensorFlow Lite agrees with the SavedModel to %.1g", difference)
        return runner

    def _run_batch(self, kind: str, values: Sequence[Any]) -> list[tuple]:
        if kind == PIXELS and self._lite_runner is not None:
            outputs = self._lite_runner(np.stack(values))
            names = outputs["class_name"]
        else:
            outputs = self._run_tensorflow(kind, values)
            names = outputs["class_name"].numpy()
            outputs = {key: value.numpy() for key, value in outputs.items()}
        return list(zip(outputs["probabilities"], outputs["class_index"],
                        [name.decode() for name in names], strict=True))

    def _run_tensorflow(self, kind: str, values: Sequence[Any]) -> dict:
        import tensorflow as tf

        signature, argument, dtype = self._signatures[kind]
        batch = np.stack(values) if kind == PIXELS else list(values)
        try:
            return signature(**{argument: tf.constant(batch, dtype)})
        except tf.errors.InvalidArgumentError as error:
            # TensorFlow's message ends with the reason; the graph trace before it is noise.
            reason = [line for line in error.message.splitlines() if line.strip()][-1]
            raise InvalidInput(f"the image cannot be decoded ({reason.strip()})") from None

    async def predict(self, request: ParsedRequest,
                      headers: dict[str, str] | None = None) -> tuple[ParsedRequest, Predictions]:
        results = await self.batcher.submit(request.items)
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


class NoOpModel(_ProtocolModel):
    """The same server with the model call replaced by a constant answer: requests are parsed,
    checked and decoded and responses formatted as usual. The benchmark's floor."""

    def load(self) -> bool:
        self.ready = True
        return self.ready

    async def predict(self, request: ParsedRequest, headers=None):
        count = len(request)
        probabilities = np.full((count, 10), 0.1, np.float32)
        return request, Predictions(probabilities, np.zeros(count, np.int32),
                                    ["T-shirt/top"] * count)


class BareNoOpModel(NoOpModel):
    """KServe's floor: not even the request is looked at."""

    async def preprocess(self, payload, headers=None) -> ParsedRequest:
        if isinstance(payload, InferRequest):
            count = int(payload.inputs[0].shape[0]) if payload.inputs else 1
            return ParsedRequest("v2", [(IMAGE_BYTES, None)] * count, payload.id or "")
        instances = payload.get("instances", []) if isinstance(payload, dict) else []
        return ParsedRequest("v1", [(IMAGE_BYTES, None)] * max(len(instances), 1))
