"""Request parsing and response formatting for the Fashion-MNIST predictor.

Two request shapes per protocol, checked before anything reaches the model so that one bad
instance is a 400 naming it, never a failed batch:

* V1 (TF Serving's REST API, as the book's clients call it)::

    {"instances": [{"image_bytes": {"b64": "<PNG or JPEG, any size>"}}]}
    {"instances": [[[0, 12, ...28 numbers], ...28 rows]]}          # raw 28×28 pixels, 0–255
    {"instances": [{"pixels": [[...], ...]}]}                      # the same, named

  answered with ``{"predictions": [{"probabilities": [...10], "class_index": 9,
  "class_name": "Ankle boot"}]}``.
* V2 (Open Inference Protocol): one input named ``image_bytes`` (``BYTES`` ``[N]``, base64
  strings in JSON or raw bytes with the binary extension) or ``pixels`` (``FP32``/``UINT8``/…
  ``[N, 28, 28]``), answered with the outputs ``probabilities`` ``FP32 [N, 10]``,
  ``class_index`` ``INT32 [N]`` and ``class_name`` ``BYTES [N]``.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from fmnist.dataset.official import IMAGE_SIZE

IMAGE_BYTES = "image_bytes"
PIXELS = "pixels"
KINDS = (IMAGE_BYTES, PIXELS)
# Formats TensorFlow's decode_image reads, by their leading bytes.
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")
MAX_IMAGE_PIXELS = 4096 * 4096
_LOSSLESS_FORMATS = ("PNG", "BMP")
_V2_PIXEL_TYPES = {"FP32", "FP64", "FP16", "UINT8", "UINT16", "INT8", "INT16", "INT32", "INT64"}


@dataclass
class ParsedRequest:
    """The instances of one request, ready for the model."""

    protocol: str  # "v1" or "v2"
    items: list[tuple[str, Any]]  # (IMAGE_BYTES, encoded bytes) or (PIXELS, float32 [28, 28])
    request_id: str = ""

    def __len__(self) -> int:
        return len(self.items)


def _check_count(count: int, max_instances: int, field: str) -> None:
    if count == 0:
        raise InvalidInput(f"empty batch: '{field}' has no items; send at least one image")
    if count > max_instances:
        raise InvalidInput(
            f"{count} instances in one request; at most {max_instances} are accepted, "
            "split the request"
        )


def check_image_bytes(data: bytes, where: str) -> tuple[str, Any]:
    """Rejects bytes that are not a readable PNG, JPEG, GIF or BMP of a sane size.

    A lossless 28×28 grayscale image (the dataset's own format) is decoded here into pixels:
    exactly what the graph's decoder would produce, without a TensorFlow call. Anything else
    stays encoded for the SavedModel's ``serving_default`` graph to decode and resize.
    """
    if not data.startswith(_IMAGE_MAGIC):
        raise InvalidInput(f"{where}: the bytes are not a PNG, JPEG, GIF or BMP image")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InvalidInput(
                    f"{where}: the image is {width}×{height}; send at most {MAX_IMAGE_PIXELS} "
                    f"pixels (it is resized to {IMAGE_SIZE}×{IMAGE_SIZE} anyway)"
                )
            if (image.format in _LOSSLESS_FORMATS and image.mode == "L"
                    and image.size == (IMAGE_SIZE, IMAGE_SIZE)):
                return PIXELS, np.asarray(image, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise InvalidInput(f"{where}: the image cannot be read ({error})") from None
    return IMAGE_BYTES, data


def decode_b64_image(text: Any, where: str) -> tuple[str, Any]:
    if not isinstance(text, str):
        raise InvalidInput(f"{where}: expected a base64 string, got {type(text).__name__}")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{where}: not valid base64") from None
    return check_image_bytes(data, where)


def check_pixels(value: Any, where: str) -> np.ndarray:
    """A 28×28 array of numbers 0–255 as float32, or a 400 that says what is wrong."""
    try:
        pixels = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidInput(
            f"{where}: pixels must be {IMAGE_SIZE}×{IMAGE_SIZE} numbers, got non-numeric values"
        ) from None
    if pixels.shape != (IMAGE_SIZE, IMAGE_SIZE):
        raise InvalidInput(
            f"{where}: pixels must have shape [{IMAGE_SIZE}, {IMAGE_SIZE}], "
            f"got {list(pixels.shape)}"
        )
    if not np.isfinite(pixels).all() or pixels.min() < 0 or pixels.max() > 255:
        raise InvalidInput(f"{where}: pixel values must be finite numbers in 0–255")
    return pixels


def _v1_instance(instance: Any, index: int) -> tuple[str, Any]:
    where = f"instance {index}"
    if isinstance(instance, dict):
        if IMAGE_BYTES in instance:
            encoded = instance[IMAGE_BYTES]
            if not isinstance(encoded, dict) or "b64" not in encoded:
                raise InvalidInput(f'{where}: expected "image_bytes": {{"b64": "<base64>"}}')
            return decode_b64_image(encoded["b64"], f"{where}.image_bytes.b64")
        if "b64" in instance:
            return decode_b64_image(instance["b64"], f"{where}.b64")
        if PIXELS in instance:
            return PIXELS, check_pixels(instance[PIXELS], f"{where}.pixels")
        raise InvalidInput(
            f'{where}: unknown keys {sorted(instance)}; send {{"image_bytes": {{"b64": ...}}}} '
            f'or {{"pixels": [[...]]}}'
        )
    if isinstance(instance, list):
        return PIXELS, check_pixels(instance, where)
    raise InvalidInput(
        f"{where}: expected an object with image_bytes or a {IMAGE_SIZE}×{IMAGE_SIZE} array, "
        f"got {type(instance).__name__}"
    )


def parse_v1(payload: Any, max_instances: int) -> ParsedRequest:
    """Parses a V1 ``:predict`` body (already JSON-decoded by KServe, or raw bytes)."""
    if isinstance(payload, bytes | bytearray | str):
        import orjson

        try:
            payload = orjson.loads(payload)
        except orjson.JSONDecodeError as error:
            raise InvalidInput(f"the body is not JSON: {error}") from None
    if not isinstance(payload, dict) or "instances" not in payload:
        raise InvalidInput('expected a JSON object {"instances": [...]}')
    instances = payload["instances"]
    if not isinstance(instances, list):
        raise InvalidInput('"instances" must be a list')
    _check_count(len(instances), max_instances, "instances")
    return ParsedRequest("v1", [_v1_instance(instance, i) for i, instance in enumerate(instances)])


def parse_v2(request: InferRequest, max_instances: int) -> ParsedRequest:
    """Parses a V2 ``/infer`` request with one ``image_bytes`` or ``pixels`` input."""
    if len(request.inputs) != 1 or request.inputs[0].name not in KINDS:
        names = [tensor.name for tensor in request.inputs]
        raise InvalidInput(
            f"expected exactly one input named {IMAGE_BYTES!r} or {PIXELS!r}, got {names}"
        )
    tensor = request.inputs[0]
    shape = list(tensor.shape)
    if tensor.name == IMAGE_BYTES:
        if tensor.datatype != "BYTES" or len(shape) != 1:
            raise InvalidInput(
                f"{IMAGE_BYTES} must be a BYTES tensor of shape [N], "
                f"got {tensor.datatype} {shape}"
            )
        _check_count(shape[0], max_instances, IMAGE_BYTES)
        try:
            items = list(tensor.as_numpy().reshape(-1))
        except (ValueError, TypeError) as error:
            raise InvalidInput(f"{IMAGE_BYTES}: {error}") from None
        if len(items) != shape[0]:
            raise InvalidInput(f"{IMAGE_BYTES}: shape {shape} but {len(items)} items of data")
        parsed = [
            check_image_bytes(item, f"{IMAGE_BYTES}[{i}]") if isinstance(item, bytes)
            else decode_b64_image(item, f"{IMAGE_BYTES}[{i}]")
            for i, item in enumerate(items)
        ]
        return ParsedRequest("v2", parsed, request.id or "")
    if tensor.datatype not in _V2_PIXEL_TYPES:
        raise InvalidInput(f"{PIXELS} must be a numeric tensor, got datatype {tensor.datatype}")
    if shape[1:] != [IMAGE_SIZE, IMAGE_SIZE] or len(shape) != 3:
        raise InvalidInput(
            f"{PIXELS} must have shape [N, {IMAGE_SIZE}, {IMAGE_SIZE}], got {shape}"
        )
    _check_count(shape[0], max_instances, PIXELS)
    try:
        array = tensor.as_numpy()
        array = array.reshape(shape)
    except (ValueError, TypeError) as error:
        raise InvalidInput(f"{PIXELS}: the data does not fit shape {shape} ({error})") from None
    parsed = [(PIXELS, check_pixels(image, f"{PIXELS}[{i}]")) for i, image in enumerate(array)]
    return ParsedRequest("v2", parsed, request.id or "")


@dataclass
class Predictions:
    """Model outputs for the instances of one request."""

    probabilities: np.ndarray  # float32 [N, 10]
    class_index: np.ndarray  # int32 [N]
    class_name: list[str]


def v1_response(predictions: Predictions) -> dict:
    return {
        "predictions": [
            {"probabilities": probabilities, "class_index": int(index), "class_name": name}
            for probabilities, index, name in zip(
                predictions.probabilities.tolist(), predictions.class_index,
                predictions.class_name, strict=True,
            )
        ]
    }


def v2_response(model_name: str, request_id: str, predictions: Predictions) -> InferResponse:
    count = len(predictions.class_name)
    outputs = [
        InferOutput("probabilities", [count, predictions.probabilities.shape[1]], "FP32",
                    predictions.probabilities.astype(np.float32).reshape(-1).tolist()),
        InferOutput("class_index", [count], "INT32",
                    [int(index) for index in predictions.class_index]),
        InferOutput("class_name", [count], "BYTES", list(predictions.class_name)),
    ]
    return InferResponse(response_id=request_id, model_name=model_name, infer_outputs=outputs)
