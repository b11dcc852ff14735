"""Shared helpers of the operator library: argument checks, so that a bad call fails at the call with a
message naming the operator, and building one compute."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Sequence
from typing import Any

from tensorad.ir import Expr, Tensor, var
from tensorad.ir import dtype as dt
from tensorad.ir.expr import cast
from tensorad.lang import make_compute, reduce_axis


def check_tensor(x: Any, op: str, what: str = "input") -> Tensor:
    """``x`` itself if it is a tensor, else a ``TypeError`` naming ``op``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a tensor, got {type(x).__name__} {x!r}")
    return x


def check_float(x: Any, op: str) -> Tensor:
    """``x`` itself if it is a floating-point tensor, else an error naming ``op``."""
    check_tensor(x, op)
    if not dt.is_float(x.dtype):
        raise TypeError(f"{op}: needs a float tensor, {x.name} is {x.dtype}")
    return x


def check_ndim(x: Tensor, op: str, ndim: int, layout: str = "") -> None:
    if x.ndim != ndim:
        layout = f" ({layout})" if layout else ""
        raise ValueError(f"{op}: {x.name} must be {ndim}-d{layout}, got shape {x.shape}")


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def normalize_axis(axis: Any, ndim: int, op: str) -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative axis."""
    if hasattr(axis, "item") and not isinstance(axis, Expr):
        axis = axis.item()
    if not is_int(axis):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a {ndim}-d tensor")
    return axis % ndim


def normalize_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """``None`` (all axes), an int or a sequence of ints, as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = [normalize_axis(a, ndim, op) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis!r} lists an axis twice")
    return tuple(sorted(out))


def as_tuple(value: Any, n: int, op: str, what: str, minimum: int = 0) -> tuple[int, ...]:
    """An int (repeated ``n`` times) or a sequence of ``n`` ints, each ``>= minimum``."""
    if is_int(value):
        vals = (value,) * n
    elif isinstance(value, (tuple, list)) and len(value) == n and all(is_int(v) for v in value):
        vals = tuple(value)
    else:
        raise TypeError(f"{op}: {what} must be an int or a sequence of {n} ints, got {value!r}")
    if any(v < minimum for v in vals):
        raise ValueError(f"{op}: {what} must be >= {minimum}, got {value!r}")
    return vals


def input_index(out: Sequence[Expr], ks: Sequence[Expr], axes: Sequence[int], ndim: int,
                  keepdims: bool) -> list[Expr]:
    """The input index of a reduction over ``axes``: each reduced axis from ``ks``, the others from the
    output index ``out`` (which holds the reduced axes too, of size 1, with ``keepdims``)."""
    red, kept = iter(ks), iter(out)
    if keepdims:
        return [next(red) if d in axes else out[d] for d in range(ndim)]
    return [next(red) if d in axes else next(kept) for d in range(ndim)]


def scale(v: Expr, factor: int) -> Expr:
    """``v * factor``, or ``v`` itself for a factor 1."""
    return v if factor == 1 else v * factor


def new_compute(shape: Sequence[int], fbody: Callable[[tuple[Expr, ...]], Expr], name: str,
                tag: str = "", axis_names: Sequence[str] | None = None) -> Tensor:
    """A one-output compute whose body is ``fbody(axes)``, its axes ``ax0, ax1, ...`` or ``axis_names``."""
    shape = tuple(shape)
    names = list(axis_names) if axis_names is not None else [f"ax{d}" for d in range(len(shape))]
    axes = tuple(var(n, 0, s) for n, s in zip(names, shape))
    return make_compute(name, axes, (fbody(axes),), tag)[0]


def reduce_compute(shape: Sequence[int], extent: int, axis_name: str, reducer: Callable,
                   term: Callable[[tuple[Expr, ...], Expr], Expr], name: str, tag: str,
                   where: Callable[[tuple[Expr, ...], Expr], Expr | None] | None = None) -> Tensor:
    """:func:`new_compute` of ``reducer(term(axes, k))`` over a fresh axis ``k`` of ``extent`` (where
    ``where(axes, k)``)."""
    def body(axes: tuple[Expr, ...]) -> Expr:
        k = reduce_axis((0, extent), axis_name)
        return reducer(term(axes, k), k, where=None if where is None else where(axes, k))
    return new_compute(shape, body, name, tag)


# ---- half storage: an operator on half tensors returns half tensors, as PyTorch's do ------

_INSIDE = contextvars.ContextVar("tensorad_topi_inside", default=False)


def _storage_dtype(args: Sequence[Any]) -> str | None:
    """The half dtype shared by every float tensor among ``args`` (lists searched), or ``None``."""
    found: set[str] = set()
    stack = list(args)
    while stack:
        a = stack.pop()
        if isinstance(a, (list, tuple)):
            stack.extend(a)
        elif isinstance(a, Tensor) and dt.is_float(a.dtype):
            found.add(a.dtype)
    return found.pop() if len(found) == 1 and dt.is_half(next(iter(found))) else None


def _stored(t: Any, dtype: str) -> Any:
    if not isinstance(t, Tensor) or t.dtype != dt.compute_dtype(dtype):
        return t
    return new_compute(t.shape, lambda axes: cast(dtype, t[axes]), f"{t.name}.{dtype}", "elemwise")


def keeps_storage(fn: Callable) -> Callable:
    """``fn`` (an operator) made to store its float32 results in its tensor arguments' half dtype,
    computed in float32 and rounded once at the end (the outermost operator only)."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        if _INSIDE.get():
            return fn(*args, **kwargs)
        token = _INSIDE.set(True)
        try:
            out = fn(*args, **kwargs)
        finally:
            _INSIDE.reset(token)
        dtype = _storage_dtype([*args, *kwargs.values()])
        if dtype is None:
            return out
        if isinstance(out, (tuple, list)):
            return type(out)(_stored(t, dtype) for t in out)
        return _stored(out, dtype)

    return op
