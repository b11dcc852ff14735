"""Reductions of a tensor over some of its axes: ``sum``, ``max``, ``min``, ``prod``.  ``sum(X, axis=1)``
for ``X [n, m, p]`` is ``Y[i, j] = sum_k X[i, k, j]``; ``keepdims=True`` keeps the axis with size 1;
``axis=None`` reduces every axis; negative axes count from the end."""

from __future__ import annotations

from typing import Any

from tensorad.ir import Tensor
from tensorad.ir import reducer as _reducer
from tensorad.lang import reduce_axis

from ._util import check_tensor, input_index, new_compute, normalize_axes


def reduce(x: Tensor, kind: str, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Tensor:
    """Reduce ``X`` with the built-in reducer ``kind`` over ``axis``."""
    name = name or kind
    check_tensor(x, name)
    axes = normalize_axes(axis, x.ndim, name)
    if not axes:  # nothing to reduce (axis=() or a 0-d tensor): a copy, as NumPy does
        return new_compute(x.shape, lambda ax: x[ax], name, "reduce")
    if kind in ("sum", "prod") and x.dtype == "bool":
        raise TypeError(f"{name}: cannot {kind} a boolean tensor")
    red_names = ["k"] if len(axes) == 1 else [f"k{d}" for d in range(len(axes))]
    kept = [d for d in range(x.ndim) if d not in axes]
    out_shape = [1 if d in axes else s for d, s in enumerate(x.shape)] if keepdims \
        else [x.shape[d] for d in kept]
    names = [f"ax{d}" for d in range(len(out_shape))]
    reducer = _reducer.BUILTIN_REDUCERS[kind]

    def body(out_axes):
        ks = [reduce_axis((0, x.shape[d]), n) for d, n in zip(axes, red_names)]
        return reducer(x[tuple(input_index(out_axes, ks, axes, x.ndim, keepdims))], ks)

    return new_compute(out_shape, body, name, "reduce", names)


def sum(x: Tensor, axis: Any = None, keepdims: bool = False, name: str = "sum") -> Tensor:  # noqa: A001
    """The sum of ``X`` over ``axis`` (an int, a sequence of ints, or ``None`` for all)."""
    return reduce(x, "sum", axis, keepdims, name)


def max(x: Tensor, axis: Any = None, keepdims: bool = False, name: str = "max") -> Tensor:  # noqa: A001
    """The maximum of ``X`` over ``axis``."""
    return reduce(x, "max", axis, keepdims, name)


def min(x: Tensor, axis: Any = None, keepdims: bool = False, name: str = "min") -> Tensor:  # noqa: A001
    """The minimum of ``X`` over ``axis``."""
    return reduce(x, "min", axis, keepdims, name)


def prod(x: Tensor, axis: Any = None, keepdims: bool = False, name: str = "prod") -> Tensor:
    """The product of ``X`` over ``axis``."""
    return reduce(x, "prod", axis, keepdims, name)
