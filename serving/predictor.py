"""The Fashion-MNIST predictor: a ``kserve.Model`` over the exported SavedModel.

It answers KServe's V1 and V2 endpoints (see :mod:`serving.protocol` for the request shapes)
with one model call per batch of concurrent instances (:mod:`serving.batching`). Encoded images
go through the SavedModel's ``serving_default`` signature, the one TF Serving uses, so this
server and the TF Serving runtime give the same answers; pixel arrays go through
``serving_pixels``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InferenceError, InvalidInput
from kserve.protocol.infer_type import InferRequest

from serving.batching import AdaptiveBatcher
from serving.protocol import (
    IMAGE_BYTES,
    ParsedRequest,
    Predictions,
    parse_v1,
    parse_v2,
    v1_response,
    v2_response,
)

DEFAULT_MAX_INSTANCES = 256


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
                 max_batch_latency_ms: float = 2.0,
                 max_instances: int = DEFAULT_MAX_INSTANCES):
        super().__init__(name, max_instances)
        self.model_dir = model_dir
        self.saved_model_dir = ""
        self.batcher = AdaptiveBatcher(self._run_batch, max_batch_size, max_batch_latency_ms)
        self._signatures: dict[str, Any] = {}

    def load(self) -> bool:
        import tensorflow as tf

        from fmnist.training.export import BYTES_SIGNATURE, PIXELS_SIGNATURE

        self.saved_model_dir = resolve_saved_model_dir(self.model_dir)
        loaded = tf.saved_model.load(self.saved_model_dir)
        self._loaded = loaded  # keeps the signatures' variables alive
        self._signatures = {
            IMAGE_BYTES: (loaded.signatures[BYTES_SIGNATURE], "image_bytes", tf.string),
            "pixels": (loaded.signatures[PIXELS_SIGNATURE], "pixels", tf.float32),
        }
        # Trace both paths now, not on the first request.
        self._run_batch("pixels", [np.zeros((28, 28), np.float32)])
        self.ready = True
        return self.ready

    def _run_batch(self, kind: str, values: Sequence[Any]) -> list[tuple]:
        import tensorflow as tf

        signature, argument, dtype = self._signatures[kind]
        batch = np.stack(values) if kind == "pixels" else list(values)
        try:
            outputs = signature(**{argument: tf.constant(batch, dtype)})
        except tf.errors.InvalidArgumentError as error:
            # TensorFlow's message ends with the reason; the graph trace before it is noise.
            reason = [line for line in error.message.splitlines() if line.strip()][-1]
            raise InvalidInput(f"the image cannot be decoded ({reason.strip()})") from None
        probabilities = outputs["probabilities"].numpy()
        class_index = outputs["class_index"].numpy()
        names = [name.decode() for name in outputs["class_name"].numpy()]
        return list(zip(probabilities, class_index, names, strict=True))

    async def predict(self, request: ParsedRequest,
                      headers: dict[str, str] | None = None) -> tuple[ParsedRequest, Predictions]:
        results = await self.batcher.submit(request.kind, request.values)
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
    """The same server minus the model: parses nothing and answers a fixed prediction per
    instance. The benchmark's measure of what the framework alone costs."""

    def load(self) -> bool:
        self.ready = True
        return self.ready

    async def preprocess(self, payload, headers=None) -> ParsedRequest:
        if isinstance(payload, InferRequest):
            count = int(payload.inputs[0].shape[0]) if payload.inputs else 1
            return ParsedRequest("v2", IMAGE_BYTES, [None] * count, payload.id or "")
        instances = payload.get("instances", []) if isinstance(payload, dict) else []
        return ParsedRequest("v1", IMAGE_BYTES, [None] * max(len(instances), 1))

    async def predict(self, request: ParsedRequest, headers=None):
        count = len(request)
        probabilities = np.full((count, 10), 0.1, np.float32)
        return request, Predictions(probabilities, np.zeros(count, np.int32),
                                    ["T-shirt/top"] * count)
