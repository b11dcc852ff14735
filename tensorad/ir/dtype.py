"""Data types of the IR: names, classification and promotion.

Types are plain strings (``"float32"``, ``"int32"``, ``"bool"``) so that they print, hash and
compare without ceremony.  Index variables are ``int32``; code generation may widen index
arithmetic to 64 bits, the IR's meaning does not change.
"""

from __future__ import annotations

FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")
BOOL = "bool"
INDEX = "int32"
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (BOOL,)


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


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_bool(dtype: str) -> bool:
    return dtype == BOOL


def bits(dtype: str) -> int:
    return 1 if dtype == BOOL else int(dtype[-2:])


def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic result: float beats int beats bool, wider beats narrower."""
    if a == b:
        return a
    rank = {BOOL: 0, "int32": 1, "int64": 2, "float32": 3, "float64": 4}
    return a if rank[a] > rank[b] else b


def min_value(dtype: str) -> float | int:
    """The smallest value of ``dtype`` (``-inf`` for floats): the identity of a max reduction."""
    import numpy as np

    dtype = check_dtype(dtype)
    if is_float(dtype):
        return float("-inf")
    return int(np.iinfo(dtype).min)


def max_value(dtype: str) -> float | int:
    """The largest value of ``dtype`` (``+inf`` for floats): the identity of a min reduction."""
    import numpy as np

    dtype = check_dtype(dtype)
    if is_float(dtype):
        return float("inf")
    return int(np.iinfo(dtype).max)
