"""Plain data across the grading boundary: encode and decode without pickle.

What a learner's answer computes for the grader crosses a process boundary as JSON: numbers,
strings, booleans, None, numpy arrays (dtype, shape and the raw bytes in base64), numpy
scalars, torch tensors (as arrays, marked), bytes, and tuples, lists and dicts of these.
Nothing is ever unpickled, so decoding runs no code of the sender's: the worst a forged
message can do is carry wrong values, which the grader's comparison then rejects.

``encode(x)`` raises :class:`Unencodable` naming the type for anything else (a function, a
labkit Tensor, a dataclass): a check whose answer returns such objects summarises them as
plain data in a ``derive`` function that runs next to the answer (see
:mod:`labkit.check.handles`).
"""
from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

_TAG = "__plain__"
MAX_DEPTH = 64
MAX_ITEMS = 1_000_000
ALLOWED_DTYPE_KINDS = "biufcSUM"      # no object arrays (they would hold arbitrary objects)


class Unencodable(TypeError):
    """A value that cannot cross the grading boundary as plain data."""


def encode(value: Any) -> Any:
    """A JSON-ready structure for ``value`` (see the module docstring for what is allowed)."""
    return _enc(value, 0)


def decode(data: Any) -> Any:
    """The value :func:`encode` was given (torch tensors come back as torch tensors when torch
    is importable, else as numpy arrays)."""
    return _dec(data, 0)


def dumps(value: Any) -> str:
    return json.dumps(encode(value), allow_nan=False, separators=(",", ":"))


def loads(text: str) -> Any:
    return decode(json.loads(text))


def same(a: Any, b: Any) -> bool:
    """Whether two values encode identically (bit-equal arrays, equal numbers and shapes)."""
    try:
        return dumps(a) == dumps(b)
    except Unencodable:
        return False


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {_TAG: "float", "v": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _array(a: np.ndarray, kind: str) -> dict:
    if a.dtype.kind not in ALLOWED_DTYPE_KINDS or a.dtype.fields is not None:
        raise Unencodable(f"an array of dtype {a.dtype} (object or record arrays cannot be "
                          f"sent as plain data)")
    if a.size > MAX_ITEMS:
        raise Unencodable(f"an array of {a.size} elements (more than {MAX_ITEMS})")
    if not a.flags.c_contiguous:
        a = a.copy(order="C")          # (ascontiguousarray would make a 0-d array 1-d)
    return {_TAG: kind, "dtype": a.dtype.str, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _enc(x: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise Unencodable(f"a structure nested more than {MAX_DEPTH} levels deep")
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x if abs(x) < 2 ** 53 else {_TAG: "int", "v": str(x)}
    if isinstance(x, float):
        return _float(x)
    if isinstance(x, complex):
        return {_TAG: "complex", "re": _float(x.real), "im": _float(x.imag)}
    if isinstance(x, np.ndarray):
        return _array(x, "ndarray")
    if isinstance(x, np.generic):
        if x.dtype.kind not in ALLOWED_DTYPE_KINDS:
            raise Unencodable(f"a numpy scalar of dtype {x.dtype}")
        return {_TAG: "scalar", "array": _array(np.asarray(x), "ndarray")}
    if isinstance(x, (bytes, bytearray)):
        return {_TAG: "bytes", "data": base64.b64encode(bytes(x)).decode("ascii")}
    if isinstance(x, tuple):
        return {_TAG: "tuple", "items": [_enc(v, depth + 1) for v in x]}
    if isinstance(x, list):
        return [_enc(v, depth + 1) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) and k != _TAG for k in x):
            return {k: _enc(v, depth + 1) for k, v in x.items()}
        return {_TAG: "dict", "items": [[_enc(k, depth + 1), _enc(v, depth + 1)]
                                         for k, v in x.items()]}
    module = type(x).__module__ or ""
    if module.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter"):
        return {_TAG: "torch", "array": _array(x.detach().cpu().numpy(), "ndarray")}
    raise Unencodable(f"a value of type {type(x).__module__}.{type(x).__qualname__}")


def _dec(d: Any, depth: int) -> Any:
    if depth > MAX_DEPTH + 1:
        raise ValueError("plain data nested too deep")
    if isinstance(d, list):
        return [_dec(v, depth + 1) for v in d]
    if not isinstance(d, dict):
        return d
    kind = d.get(_TAG)
    if kind is None:
        return {k: _dec(v, depth + 1) for k, v in d.items()}
    if kind == "float":
        return float(d["v"])
    if kind == "int":
        return int(d["v"])
    if kind == "complex":
        return complex(_dec(d["re"], depth), _dec(d["im"], depth))
    if kind == "ndarray":
        dtype = np.dtype(d["dtype"])
        if dtype.kind not in ALLOWED_DTYPE_KINDS or dtype.fields is not None:
            raise ValueError(f"plain data: dtype {dtype} is not allowed")
        raw = base64.b64decode(d["data"])
        shape = tuple(int(s) for s in d["shape"])
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if kind == "scalar":
        return _dec(d["array"], depth)[()]
    if kind == "bytes":
        return base64.b64decode(d["data"])
    if kind == "tuple":
        return tuple(_dec(v, depth + 1) for v in d["items"])
    if kind == "dict":
        return {_hashable(_dec(k, depth + 1)): _dec(v, depth + 1) for k, v in d["items"]}
    if kind == "torch":
        array = _dec(d["array"], depth)
        try:
            import torch  # deferred: torch
        except ImportError:              # pragma: no cover - torch is a dependency
            return array
        return torch.from_numpy(array)
    raise ValueError(f"plain data: unknown tag {kind!r}")


def _hashable(k: Any) -> Any:
    if isinstance(k, list):
        return tuple(_hashable(v) for v in k)
    return k
