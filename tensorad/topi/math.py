"""Elementwise operators on one tensor, each one compute ``Y[i...] = f(X[i...])`` tagged ``"elemwise"``,
and tensors filled with a constant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensorad.ir import Expr, Tensor, const
from tensorad.ir import dtype as dt
from tensorad.lang import tensor_lang as lang

from ._util import check_tensor, is_int, new_compute


def elemwise(x: Tensor, f: Callable[[Expr], Expr], name: str, tag: str = "elemwise") -> Tensor:
    """``Y[i...] = f(X[i...])`` for a scalar function ``f``."""
    check_tensor(x, name)
    return new_compute(x.shape, lambda ax: f(x[ax]), name, tag)


def _unary(fn: Callable[[Expr], Expr], name: str, float_only: bool = True):
    def op(x: Tensor, name: str = name) -> Tensor:
        check_tensor(x, op.__name__)
        if float_only and not dt.is_float(x.dtype):
            raise TypeError(f"{op.__name__}: needs a float tensor, {x.name} is {x.dtype} "
                            f"(cast it with ta.topi.cast first)")
        return elemwise(x, fn, name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}(X)``."
    return op


exp = _unary(lang.exp, "exp")
log = _unary(lang.log, "log")
sqrt = _unary(lang.sqrt, "sqrt")
sigmoid = _unary(lang.sigmoid, "sigmoid")
tanh = _unary(lang.tanh, "tanh")
sin = _unary(lang.sin, "sin")
cos = _unary(lang.cos, "cos")
erf = _unary(lang.erf, "erf")
abs = _unary(lang.abs, "abs", float_only=False)  # noqa: A001
negative = _unary(lambda v: -v, "negative", float_only=False)


def cast(x: Tensor, dtype: str, name: str = "cast") -> Tensor:
    """``X`` converted elementwise to ``dtype``."""
    dtype = dt.check_dtype(dtype)
    return elemwise(x, lambda v: lang.cast(dtype, v), name)


def full(shape: Sequence[int], fill_value: Any, dtype: str = "float32", name: str = "full") -> Tensor:
    """A tensor of ``shape`` whose every element is ``fill_value``."""
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(is_int(s) and s >= 0 for s in shape):
        raise TypeError(f"{name}: shape must be a sequence of non-negative ints, got {shape!r}")
    v = fill_value
    if isinstance(v, Expr) or not isinstance(v, (int, float)) and not hasattr(v, "item"):
        raise TypeError(f"{name}: fill value must be a Python number, got {v!r}")
    value = const(v.item() if hasattr(v, "item") else v, dt.check_dtype(dtype))
    return new_compute(tuple(shape), lambda ax: value, name, "elemwise")


def zeros(shape: Sequence[int], dtype: str = "float32", name: str = "zeros") -> Tensor:
    return full(shape, 0, dtype, name)


def ones(shape: Sequence[int], dtype: str = "float32", name: str = "ones") -> Tensor:
    return full(shape, 1, dtype, name)


def full_like(x: Tensor, fill_value: Any, name: str = "full_like") -> Tensor:
    """A tensor of ``X``'s shape and dtype filled with ``fill_value``."""
    check_tensor(x, name)
    return full(x.shape, fill_value, x.dtype, name)


def zeros_like(x: Tensor, name: str = "zeros_like") -> Tensor:
    return full_like(x, 0, name)


def ones_like(x: Tensor, name: str = "ones_like") -> Tensor:
    return full_like(x, 1, name)
