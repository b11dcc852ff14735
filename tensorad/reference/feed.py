"""Checking what ``ta.evaluate`` is fed: placeholders to NumPy arrays, never a silent wrong answer.

* every key must be a placeholder (else ``TypeError``); unused placeholders are accepted and checked;
* every placeholder the outputs depend on must be present, with exactly its shape (``ValueError``);
* an array is cast to the placeholder's dtype, except floats to an integer placeholder, non-bools to a
  bool one and integers that do not fit (``TypeError`` / ``ValueError``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tensorad.ir import dtype as dt
from tensorad.ir.printer import a_type
from tensorad.ir.tensor import Tensor


def _describe(t: Tensor) -> str:
    return f"placeholder {t.name!r} (shape {t.shape}, dtype {t.dtype})"


def convert_array(t: Tensor, value: Any) -> np.ndarray:
    """``value`` as a fresh array of ``t``'s shape and dtype, or a clear error."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - numpy raises many kinds here
        raise TypeError(f"evaluate: {_describe(t)} was fed {a_type(value)} that is "
                        f"not an array ({exc})") from None
    kind = "f" if arr.dtype == dt.numpy_dtype("bfloat16") else arr.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"evaluate: {_describe(t)} was fed an array of dtype {arr.dtype}; "
                        f"expected numeric values of dtype {t.dtype}")
    if dt.is_int(t.dtype) and kind == "f":
        raise TypeError(f"evaluate: {_describe(t)} was fed float values ({arr.dtype}); cast "
                        f"them explicitly (a.astype('{t.dtype}')) if truncation is meant")
    if dt.is_bool(t.dtype) and kind != "b":
        raise TypeError(f"evaluate: {_describe(t)} was fed {arr.dtype} values; expected bool")
    if arr.shape != t.shape:
        raise ValueError(f"evaluate: {_describe(t)} was fed an array of shape {arr.shape}; "
                         f"expected shape {t.shape}")
    if dt.is_int(t.dtype) and kind in "iu" and arr.size:
        info = np.iinfo(t.dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise ValueError(f"evaluate: {_describe(t)} was fed integers outside the {t.dtype} "
                             f"range [{info.min}, {info.max}]")
    return np.array(arr, dtype=dt.numpy_dtype(t.dtype), copy=True)


def check_feed(needed: Iterable[Tensor], feed: Mapping) -> dict[Tensor, np.ndarray]:
    """Validate ``feed`` and return ``{placeholder: array}`` for every fed placeholder."""
    if not isinstance(feed, Mapping):
        raise TypeError(f"evaluate: feed must be a dict {{placeholder tensor: array}}, got "
                        f"{type(feed).__name__}")
    values: dict[Tensor, np.ndarray] = {}
    for key, value in feed.items():
        if not isinstance(key, Tensor):
            raise TypeError(f"evaluate: feed key {key!r} is not a tensor; feed maps "
                            "placeholders (ta.placeholder) to arrays")
        if not key.is_placeholder:
            raise TypeError(f"evaluate: feed key {key.name!r} is a computed tensor, not a "
                            "placeholder; only ta.placeholder tensors can be fed")
        values[key] = convert_array(key, value)
    for t in needed:
        if t not in values:
            raise ValueError(f"evaluate: {_describe(t)} is missing from feed")
    return values
