"""Reading and writing the IDX format of (Fashion-)MNIST."""

from __future__ import annotations

import gzip
import struct
import zlib

import numpy as np

from fmnist_kfp.errors import DataSourceError

IMAGES_MAGIC = 2051  # unsigned byte, 3 dimensions
LABELS_MAGIC = 2049  # unsigned byte, 1 dimension
MAGIC = {"images": IMAGES_MAGIC, "labels": LABELS_MAGIC}


def decode_idx(payload: bytes, name: str, kind: str | None = None) -> np.ndarray:
    """Decodes an uncompressed IDX payload of unsigned bytes into an array; with ``kind``
    (``images`` or ``labels``) the file must hold that kind."""
    if len(payload) < 8:
        raise DataSourceError(f"{name}: too short to be an IDX file ({len(payload)} bytes)")
    magic = struct.unpack(">I", payload[:4])[0]
    if magic not in (IMAGES_MAGIC, LABELS_MAGIC):
        raise DataSourceError(
            f"{name}: not an IDX file of unsigned bytes (magic {magic}, expected "
            f"{IMAGES_MAGIC} for images or {LABELS_MAGIC} for labels)"
        )
    if kind is not None and magic != MAGIC[kind]:
        held = "images" if magic == IMAGES_MAGIC else "labels"
        raise DataSourceError(
            f"{name}: holds {held} (IDX magic {magic}) where {kind} (magic {MAGIC[kind]}) "
            "belong; the files are swapped or misnamed"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", payload[4:header])
    expected = header + int(np.prod(dims))
    if len(payload) != expected:
        raise DataSourceError(
            f"{name}: IDX header promises {dims} ({expected} bytes) but the file has "
            f"{len(payload)} bytes; the file is truncated or corrupted"
        )
    return np.frombuffer(payload, dtype=np.uint8, offset=header).reshape(dims)


def decode_idx_gz(compressed: bytes, name: str, kind: str | None = None) -> np.ndarray:
    """Decompresses a gzip IDX file and decodes it."""
    try:
        payload = gzip.decompress(compressed)
    except (OSError, EOFError, zlib.error) as err:
        raise DataSourceError(
            f"{name}: not a valid gzip file ({err}); download it again from the Fashion-MNIST "
            "release") from err
    return decode_idx(payload, name, kind)


def encode_idx(array: np.ndarray) -> bytes:
    """Encodes a uint8 array (images N×H×W or labels N) as an IDX payload."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    magic = 0x0800 | array.ndim
    header = struct.pack(f">I{array.ndim}I", magic, *array.shape)
    return header + array.tobytes()
