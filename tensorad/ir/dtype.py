"""Data types of the IR: names, classification and promotion.

Types are plain strings (``"float32"``, ``"int32"``, ``"bool"``).  Index variables are ``int32``; code
generation may widen index arithmetic to 64 bits.  ``float16`` and ``bfloat16`` (``HALF_DTYPES``) only
store: every read of a half tensor is a ``CAST`` to ``float32`` and every half result a ``CAST`` of a
``float32`` value (round to nearest, ties to even), so arithmetic runs in float32."""

from __future__ import annotations

import numpy as np

HALF_DTYPES = ("float16", "bfloat16")
FLOAT_DTYPES = HALF_DTYPES + ("float32", "float64")
INT_DTYPES = ("int32", "int64")
BOOL = "bool"
INDEX = "int32"
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (BOOL,)
ACCUMULATE = "float32"  # the type half values compute and accumulate in


def check_dtype(dtype: str) -> str:
    """Return ``dtype`` normalised to its canonical name, or raise ``TypeError``."""
    if not isinstance(dtype, str):
        dtype = getattr(dtype, "name", str(dtype))  # accept numpy dtypes
    alias = {"float": "float32", "int": "int32", "double": "float64", "uint1": BOOL}
    dtype = alias.get(dtype, dtype)
    if dtype not in ALL_DTYPES:
        raise TypeError(f"unsupported dtype {dtype!r}; expected one of {', '.join(ALL_DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_half(dtype: str) -> bool:
    """True for the storage-only float types (float16, bfloat16)."""
    return dtype in HALF_DTYPES


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic on values of ``dtype`` runs in: float32 for half types."""
    return ACCUMULATE if dtype in HALF_DTYPES else dtype


def numpy_dtype(dtype: str):
    """The NumPy dtype that holds ``dtype`` (bfloat16 is ``ml_dtypes.bfloat16``)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.bool_ if dtype == BOOL else dtype)


def round_to(value: float, dtype: str) -> float:
    """``value`` rounded to ``dtype`` (nearest, ties to even) as a Python float."""
    if dtype not in HALF_DTYPES and dtype != "float32":
        return float(value)
    with np.errstate(over="ignore"):
        return float(np.asarray(np.float32(value)).astype(numpy_dtype(dtype)))


def float_to_int(values, dtype: str):
    """Float ``values`` (an array or a scalar) converted to the integer ``dtype`` as generated code does
    (``fptosi.sat``): toward zero, saturated at the type's ends, NaN to 0 (unlike NumPy's ``astype``)."""
    info = np.iinfo(dtype)
    a = np.asarray(values, np.float64)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isnan(a), 0.0, np.clip(np.trunc(a), info.min, info.max))
    big = out >= 2.0**63  # int64's max rounds up to 2^63 in float64: set after the cast
    ints = np.where(big, info.max, np.where(big, 0.0, out).astype(np.int64)).astype(dtype)
    return ints if isinstance(values, np.ndarray) else int(ints)


def maximum(a, b):
    """Elementwise IEEE 754-2019 ``maximum``, as ``llvm.maximum``: NaN propagates, ``-0 < +0`` either way."""
    out = np.maximum(a, b)
    if np.result_type(out).kind != "f":
        return out
    tie = np.equal(a, b)  # only zeros differ from NumPy's choice (their signs)
    return np.where(tie, np.where(np.signbit(a), b, a), out)


def minimum(a, b):
    """Elementwise IEEE 754-2019 ``minimum`` (``llvm.minimum``): NaN propagates, ``-0 < +0``."""
    out = np.minimum(a, b)
    if np.result_type(out).kind != "f":
        return out
    tie = np.equal(a, b)
    return np.where(tie, np.where(np.signbit(a), a, b), out)


def fold_extreme(kind: str, values, axis, where, initial):
    """``max``/``min`` of ``values`` over ``axis`` where ``where`` holds (keepdims), with the
    IEEE sign of zero: a maximum is ``+0`` when any ``+0`` is among the zeros folded, a minimum
    ``-0`` when any ``-0`` is; NumPy's reduction keeps whichever zero it met first."""
    ufunc = np.maximum if kind == "max" else np.minimum
    out = ufunc.reduce(values, axis=axis, keepdims=True, where=where, initial=initial,
                       dtype=values.dtype)
    if values.dtype.kind != "f":
        return out
    zero = np.equal(values, 0) & (~np.signbit(values) if kind == "max" else np.signbit(values))
    met = np.logical_or.reduce(zero & where, axis=axis, keepdims=True)
    return np.where(np.equal(out, 0) & met, values.dtype.type(0.0 if kind == "max" else -0.0), out)


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_bool(dtype: str) -> bool:
    return dtype == BOOL


def bits(dtype: str) -> int:
    return 1 if dtype == BOOL else int(dtype[-2:])


def narrows(src: str, dst: str) -> bool:
    """Whether an integer cast from ``src`` to ``dst`` can change the value (a narrowing one wraps)."""
    return is_int(src) and is_int(dst) and bits(dst) < bits(src)


def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic result: float beats int beats bool, wider beats narrower."""
    if a == b:
        return a
    rank = {BOOL: 0, "int32": 1, "int64": 2, "float16": 3, "bfloat16": 3, "float32": 4, "float64": 5}
    if a in HALF_DTYPES and b in HALF_DTYPES:  # float16 and bfloat16 meet in float32
        return ACCUMULATE
    return a if rank[a] > rank[b] else b


def min_value(dtype: str) -> float | int:
    """The smallest value of ``dtype`` (``-inf`` for floats): the identity of a max reduction."""
    dtype = check_dtype(dtype)
    return float("-inf") if is_float(dtype) else int(np.iinfo(dtype).min)


def max_value(dtype: str) -> float | int:
    """The largest value of ``dtype`` (``+inf`` for floats): the identity of a min reduction."""
    dtype = check_dtype(dtype)
    return float("inf") if is_float(dtype) else int(np.iinfo(dtype).max)
