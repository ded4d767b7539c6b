"""Request parsing, response formatting and V2 metadata for the Fashion-MNIST predictor.

Two request shapes per protocol, checked before anything reaches the model so that one bad
instance is a 4xx naming it, never a failed batch:

* V1 (TF Serving's REST API, as the book's clients call it)::

    {"instances": [{"image_bytes": {"b64": "<PNG, JPEG, GIF, BMP or WebP, any size>"}}]}
    {"instances": [[[0, 12, ...28 numbers], ...28 rows]]}          # raw 28×28 pixels, 0–255
                                                                   # (or all in [0, 1])
    {"instances": [{"pixels": [[...], ...]}]}                      # the same, named

  answered with ``{"predictions": [{"probabilities": [...10], "class_index": 9,
  "class_name": "Ankle boot", "top_classes": [{"class_index", "class_name", "probability"}
  ×3], "margin": 0.95, "uncertain": false}]}``.
* V2 (Open Inference Protocol, REST and gRPC): one input named ``image_bytes`` (``BYTES``
  ``[N]``: raw image bytes with the binary extension or gRPC, base64 strings in JSON) or
  ``pixels`` (``FP32``/``UINT8``/… ``[N, 28, 28]``, 0–255; an image whose values all lie in
  [0, 1], some fractional, is read as a [0, 1] image, :func:`from_unit_scale`: KServe's V2
  metadata has no field for a range, kserve 0.21 ``protocol/rest/v2_datamodels.py`` L57-70),
  answered with the outputs
  ``probabilities`` ``FP32 [N, 10]``, ``class_index`` ``INT32 [N]``, ``class_name``
  ``BYTES [N]``, ``top_class_index`` ``INT32 [N, 3]``, ``top_probability`` ``FP32 [N, 3]``,
  ``margin`` ``FP32 [N]`` and ``uncertain`` ``BOOL [N]`` (:func:`certainty`).
  ``GET /v2/models/<name>`` lists exactly these (:data:`V2_INPUTS`, :data:`V2_OUTPUTS`).

Images are only opened here (header read, limits checked); the model decodes them
(:mod:`fmnist_kfp.images`).
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import (
    InferInput,
    InferOutput,
    InferRequest,
    InferResponse,
    RequestedOutput,
)

from fmnist_kfp.dataset.official import CLASS_NAMES, IMAGE_SIZE, NUM_CLASSES
from fmnist_kfp.images import ImageLimits, OpenedImage, open_image
from fmnist_kfp.settings.serving import TOP_CLASSES, ServingSettings

DEFAULT_UNCERTAIN_MARGIN = ServingSettings().uncertain_margin

IMAGE_BYTES = "image_bytes"
PIXELS = "pixels"
KINDS = (IMAGE_BYTES, PIXELS)
_V2_PIXEL_TYPES = {"FP32", "FP64", "FP16", "UINT8", "UINT16", "INT8", "INT16", "INT32", "INT64"}
# V2 model metadata: what a client discovers with GET /v2/models/<name> (-1: any batch size).
# A request carries exactly one of the two inputs.
V2_INPUTS = [
    {"name": IMAGE_BYTES, "datatype": "BYTES", "shape": [-1]},
    {"name": PIXELS, "datatype": "FP32", "shape": [-1, IMAGE_SIZE, IMAGE_SIZE]},
]
V2_OUTPUTS = [
    {"name": "probabilities", "datatype": "FP32", "shape": [-1, NUM_CLASSES]},
    {"name": "class_index", "datatype": "INT32", "shape": [-1]},
    {"name": "class_name", "datatype": "BYTES", "shape": [-1]},
    # How sure the model is: the TOP_CLASSES most probable classes, the margin between the
    # first two, and whether it is under the server's --uncertain_margin.
    {"name": "top_class_index", "datatype": "INT32", "shape": [-1, TOP_CLASSES]},
    {"name": "top_probability", "datatype": "FP32", "shape": [-1, TOP_CLASSES]},
    {"name": "margin", "datatype": "FP32", "shape": [-1]},
    {"name": "uncertain", "datatype": "BOOL", "shape": [-1]},
]

Instance = np.ndarray | OpenedImage  # float32 [28, 28] pixels, or an image still to decode


@dataclass
class ParsedRequest:
    """The instances of one request, ready for the model."""

    protocol: str  # "v1" or "v2"
    items: list[Instance]
    request_id: str = ""
    v2_request: InferRequest | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.items)


def _check_count(count: int, max_instances: int, field_name: str) -> None:
    if count == 0:
        raise InvalidInput(f"empty batch: '{field_name}' has no items; send at least one image")
    if count > max_instances:
        raise InvalidInput(
            f"{count} instances in one request; at most {max_instances} are accepted, "
            "split the request"
        )


def decode_b64_image(text: Any, where: str, limits: ImageLimits) -> OpenedImage:
    if not isinstance(text, str | bytes):
        raise InvalidInput(f"{where}: expected a base64 string, got {type(text).__name__}")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{where}: not valid base64") from None
    return open_image(data, where, limits)


def _check_pixel_values(pixels: np.ndarray, where: str) -> None:
    if not np.isfinite(pixels).all() or pixels.min() < 0 or pixels.max() > 255:
        raise InvalidInput(f"{where}: pixel values must be finite numbers in 0–255 (or all "
                           "in [0, 1], read as a [0, 1] image)")


def from_unit_scale(pixels: np.ndarray) -> np.ndarray:
    """Pixels scaled as Keras users scale images (``x / 255``) back to the dataset's 0–255:
    an image whose values all lie in [0, 1], at least one of them fractional, is read as a
    [0, 1] image. 0–255 images are whole numbers (the dataset's are 8-bit) and all but black
    ones exceed 1; an image of only 0s and 1s stays as sent."""
    if pixels.size and float(pixels.max()) <= 1.0 and float(pixels.min()) >= 0.0 \
            and not np.array_equal(pixels, np.round(pixels)):
        return pixels * np.float32(255)
    return pixels


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
    _check_pixel_values(pixels, where)
    return from_unit_scale(pixels)


def _v1_instance(instance: Any, index: int, limits: ImageLimits) -> Instance:
    where = f"instance {index}"
    if isinstance(instance, dict):
        if IMAGE_BYTES in instance:
            encoded = instance[IMAGE_BYTES]
            if not isinstance(encoded, dict) or "b64" not in encoded:
                raise InvalidInput(f'{where}: expected "image_bytes": {{"b64": "<base64>"}}')
            return decode_b64_image(encoded["b64"], f"{where}.image_bytes.b64", limits)
        if "b64" in instance:
            return decode_b64_image(instance["b64"], f"{where}.b64", limits)
        if PIXELS in instance:
            return check_pixels(instance[PIXELS], f"{where}.pixels")
        raise InvalidInput(
            f'{where}: unknown keys {sorted(instance)}; send {{"image_bytes": {{"b64": ...}}}} '
            f'or {{"pixels": [[...]]}}'
        )
    if isinstance(instance, list):
        return check_pixels(instance, where)
    raise InvalidInput(
        f"{where}: expected an object with image_bytes or a {IMAGE_SIZE}×{IMAGE_SIZE} array, "
        f"got {type(instance).__name__}"
    )


def parse_v1(payload: Any, max_instances: int, limits: ImageLimits) -> ParsedRequest:
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
    return ParsedRequest(
        "v1", [_v1_instance(instance, i, limits) for i, instance in enumerate(instances)])


def parse_v2(request: InferRequest, max_instances: int, limits: ImageLimits) -> ParsedRequest:
    """Parses a V2 ``/infer`` request (REST or gRPC) with one ``image_bytes`` or ``pixels``
    input."""
    if len(request.inputs) != 1 or request.inputs[0].name not in KINDS:
        names = [tensor.name for tensor in request.inputs]
        raise InvalidInput(
            f"expected exactly one input named {IMAGE_BYTES!r} or {PIXELS!r}, got {names}"
        )
    tensor = request.inputs[0]
    shape = [int(size) for size in tensor.shape]
    if tensor.name == IMAGE_BYTES:
        if tensor.datatype != "BYTES" or len(shape) != 1:
            raise InvalidInput(
                f"{IMAGE_BYTES} must be a BYTES tensor of shape [N], "
                f"got {tensor.datatype} {shape}"
            )
        _check_count(shape[0], max_instances, IMAGE_BYTES)
        try:
            items = list(tensor.as_numpy().reshape(-1))
        except (ValueError, TypeError, IndexError, struct.error) as error:
            raise InvalidInput(f"{IMAGE_BYTES}: {error}") from None
        if len(items) != shape[0]:
            raise InvalidInput(f"{IMAGE_BYTES}: shape {shape} but {len(items)} items of data")
        # Raw bytes (binary extension, gRPC) are the image; JSON strings are its base64.
        parsed: list[Instance] = [
            open_image(item, f"{IMAGE_BYTES}[{i}]", limits) if isinstance(item, bytes)
            else decode_b64_image(item, f"{IMAGE_BYTES}[{i}]", limits)
            for i, item in enumerate(items)
        ]
        return ParsedRequest("v2", parsed, request.id or "", request)
    if tensor.datatype not in _V2_PIXEL_TYPES:
        raise InvalidInput(f"{PIXELS} must be a numeric tensor, got datatype {tensor.datatype}")
    if shape[1:] != [IMAGE_SIZE, IMAGE_SIZE] or len(shape) != 3:
        raise InvalidInput(
            f"{PIXELS} must have shape [N, {IMAGE_SIZE}, {IMAGE_SIZE}], got {shape}"
        )
    _check_count(shape[0], max_instances, PIXELS)
    try:
        array = np.asarray(tensor.as_numpy(), dtype=np.float32).reshape(shape)
    except (ValueError, TypeError) as error:
        raise InvalidInput(f"{PIXELS}: the data does not fit shape {shape} ({error})") from None
    if not np.isfinite(array).all() or array.min() < 0 or array.max() > 255:
        valid = np.isfinite(array) & (array >= 0) & (array <= 255)
        bad = int(np.flatnonzero(~valid.all(axis=(1, 2)))[0])
        _check_pixel_values(array[bad], f"{PIXELS}[{bad}]")
    return ParsedRequest("v2", [from_unit_scale(image) for image in array], request.id or "",
                         request)


def binary_infer_request(body: bytes, json_length: Any, model_name: str) -> InferRequest:
    """A V2 REST request with the binary tensor extension (a JSON header of ``json_length``
    bytes, then each input's raw bytes), its tensors kept raw.

    KServe 0.21's ``InferRequest.from_bytes`` turns every binary input back into JSON-style
    values, BYTES ones as UTF-8 text (``protocol/infer_type.py`` L636–641, L305–321): a raw
    image is not UTF-8, so it answered 500, and a pixel tensor became a Python list of floats.
    Here a BYTES input stays its length-prefixed raw elements and a numeric one its buffer,
    both read by ``InferInput.as_numpy``; every size is checked against the body (a 400)."""
    import orjson

    try:
        length = int(json_length)
    except (TypeError, ValueError):
        raise InvalidInput(f"inference-header-content-length must be an integer, "
                           f"got {json_length!r}") from None
    if not 0 < length <= len(body):
        raise InvalidInput(f"inference-header-content-length {length} does not fit the "
                           f"{len(body)}-byte body")
    try:
        header = orjson.loads(body[:length])
        inputs = header["inputs"]
        if not isinstance(inputs, list):
            raise TypeError("'inputs' is not a list")
    except (orjson.JSONDecodeError, KeyError, TypeError) as error:
        raise InvalidInput(f"the JSON header of the binary request is not valid: {error}") \
            from None
    tensors, start = [], length
    for entry in inputs:
        try:
            tensor = InferInput(name=entry["name"], shape=list(entry["shape"]),
                                datatype=str(entry["datatype"]),
                                parameters=entry.get("parameters"))
        except (KeyError, TypeError) as error:
            raise InvalidInput(f"input {entry!r} lacks name, shape or datatype ({error})") \
                from None
        parameters = entry.get("parameters") or {}
        if entry.get("data") is not None:
            tensor.data = entry["data"]
        elif "binary_data_size" in parameters:
            size = parameters["binary_data_size"]
            if not isinstance(size, int) or size < 0 or start + size > len(body):
                raise InvalidInput(f"input {tensor.name!r}: binary_data_size {size!r} does "
                                   "not fit the body")
            tensor._raw_data = body[start:start + size]
            start += size
        else:
            raise InvalidInput(f"input {tensor.name!r} has neither data nor binary_data_size")
        tensors.append(tensor)
    outputs = header.get("outputs")
    requested = [RequestedOutput(name=output["name"], parameters=output.get("parameters"))
                 for output in outputs] if isinstance(outputs, list) else None
    return InferRequest(model_name=model_name, infer_inputs=tensors,
                        request_id=header.get("id"), parameters=header.get("parameters"),
                        request_outputs=requested)


@dataclass
class Predictions:
    """Model outputs for the instances of one request."""

    probabilities: np.ndarray  # float32 [N, 10]
    class_index: np.ndarray  # int32 [N]
    class_name: list[str]


@dataclass
class Certainty:
    """How sure the model is of each answer: its most probable classes, most probable first,
    the margin between the first two, and whether that margin is under the threshold."""

    top_class_index: np.ndarray  # int32 [N, TOP_CLASSES]
    top_probability: np.ndarray  # float32 [N, TOP_CLASSES]
    margin: np.ndarray  # float32 [N]
    uncertain: np.ndarray  # bool [N]


def certainty(probabilities: np.ndarray, uncertain_margin: float) -> Certainty:
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :TOP_CLASSES]
    top = np.take_along_axis(probabilities, order, axis=1).astype(np.float32)
    margin = (top[:, 0] - top[:, 1]).astype(np.float32)
    return Certainty(order.astype(np.int32), top, margin, margin < np.float32(uncertain_margin))


def v1_response(predictions: Predictions,
                uncertain_margin: float = DEFAULT_UNCERTAIN_MARGIN) -> dict:
    sure = certainty(predictions.probabilities, uncertain_margin)
    return {
        "predictions": [
            {"probabilities": probabilities, "class_index": int(index), "class_name": name,
             "top_classes": [{"class_index": int(c), "class_name": CLASS_NAMES[int(c)],
                              "probability": float(p)} for c, p in zip(classes, top, strict=True)],
             "margin": float(margin), "uncertain": bool(uncertain)}
            for probabilities, index, name, classes, top, margin, uncertain in zip(
                predictions.probabilities.tolist(), predictions.class_index,
                predictions.class_name, sure.top_class_index, sure.top_probability,
                sure.margin, sure.uncertain, strict=True,
            )
        ]
    }


def v2_response(model_name: str, request: ParsedRequest, predictions: Predictions,
                uncertain_margin: float = DEFAULT_UNCERTAIN_MARGIN) -> InferResponse:
    """The three outputs, in binary when the client asked for it (REST ``binary_data``
    parameters, gRPC raw inputs), restricted to the outputs it requested, if it named any."""
    count = len(predictions.class_name)
    # Lists, not arrays: KServe 0.21's InferResponse.to_grpc tests ``output.data`` for truth,
    # which an array refuses (``protocol/infer_type.py`` L1422–1426).
    outputs = [
        InferOutput("probabilities", [count, predictions.probabilities.shape[1]], "FP32",
                    predictions.probabilities.astype(np.float32).reshape(-1).tolist()),
        InferOutput("class_index", [count], "INT32",
                    [int(index) for index in predictions.class_index]),
        InferOutput("class_name", [count], "BYTES", list(predictions.class_name)),
    ]
    sure = certainty(predictions.probabilities, uncertain_margin)
    outputs += [
        InferOutput("top_class_index", [count, TOP_CLASSES], "INT32",
                    sure.top_class_index.reshape(-1).tolist()),
        InferOutput("top_probability", [count, TOP_CLASSES], "FP32",
                    sure.top_probability.reshape(-1).tolist()),
        InferOutput("margin", [count], "FP32", sure.margin.tolist()),
        InferOutput("uncertain", [count], "BOOL", sure.uncertain.tolist()),
    ]
    source = request.v2_request
    known = {output.name for output in outputs}
    requested = list(source.request_outputs or []) if source is not None else []
    unknown = [output.name for output in requested if output.name not in known]
    if unknown:
        raise InvalidInput(f"unknown outputs {unknown}; this model has {sorted(known)}")
    return InferResponse(
        response_id=request.request_id, model_name=model_name, infer_outputs=outputs,
        use_binary_outputs=bool(source is not None and source.use_binary_outputs),
        requested_outputs=requested or None,
    )
