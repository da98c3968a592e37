"""Encoding of a training state (a tree of dicts / lists / numpy arrays / JSON scalars) as bytes.

Arrays go into an `.npz` archive (no pickle, so loading a checkpoint never runs code); the rest
of the tree is JSON in the same archive, with placeholders where the arrays were. Python ints
of any size survive, which matters for numpy's RNG state (PCG64 keeps 128-bit integers).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

ENCODING_BYTES = "bytes"
ENCODING_TREE = "npz-tree"

_TREE_KEY = "__tree__"
_ARRAY_TAG = "__ndarray__"


def encode_state(state: object) -> tuple[bytes, str]:
    """Return (data, encoding): raw bytes as they are, anything else as an npz tree."""
    if isinstance(state, bytes | bytearray | memoryview):
        return bytes(state), ENCODING_BYTES
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    tree = _flatten(state, arrays)
    buffer = io.BytesIO()
    tree_bytes = np.frombuffer(json.dumps(tree, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buffer, allow_pickle=False, **{_TREE_KEY: tree_bytes}, **arrays)
    return buffer.getvalue(), ENCODING_TREE


def decode_state(data: bytes, encoding: str) -> Any:
    """Inverse of `encode_state`."""
    if encoding == ENCODING_BYTES:
        return data
    if encoding != ENCODING_TREE:
        raise ValueError(f"unknown checkpoint encoding {encoding!r}")
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        tree = json.loads(archive[_TREE_KEY].tobytes().decode())
        arrays = {name: archive[name] for name in archive.files if name != _TREE_KEY}
    return _unflatten(tree, arrays)


def _flatten(value: object, arrays: dict[str, np.ndarray[Any, Any]]) -> Any:
    if isinstance(value, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {_ARRAY_TAG: name}
    if isinstance(value, np.generic):
        # numpy scalars (np.float64, np.int64 ...) become their Python equivalent.
        return value.item()
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"state keys must be strings, got {key!r}")
            out[key] = _flatten(item, arrays)
        if _ARRAY_TAG in out:
            raise ValueError(f"{_ARRAY_TAG!r} is reserved in checkpoint state")
        return out
    if isinstance(value, list | tuple):
        return [_flatten(item, arrays) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot checkpoint a value of type {type(value).__name__}")


def _unflatten(value: Any, arrays: Mapping[str, np.ndarray[Any, Any]]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY_TAG}:
            return arrays[value[_ARRAY_TAG]]
        return {key: _unflatten(item, arrays) for key, item in value.items()}
    if isinstance(value, list):
        return [_unflatten(item, arrays) for item in value]
    return value
