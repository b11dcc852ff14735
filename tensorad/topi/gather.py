"""Gathers: ``take``, ``index_select``, ``embedding`` and ``embedding_bag``.

Each is one compute whose read of the source is indexed by data (``W[I[i], d]``), a ``DATA_INDEX``
(:class:`tensorad.ir.expr.DataIndex`) of ``mode`` ``"raise"``, ``"clip"`` or ``"wrap"``.  The gradient by
the source is a scatter-add (:mod:`tensorad.codegen.strategies.scatter`); index tensors have none."""

from __future__ import annotations

from math import prod

from tensorad.ir import Expr, Tensor, const
from tensorad.ir import dtype as dt
from tensorad.ir import reducer as _reducer
from tensorad.ir.expr import GATHER_MODES, data_index
from tensorad.lang import tensor_lang as lang

from ._util import check_tensor, new_compute, normalize_axis


def _check(x: Tensor, indices: Tensor, mode: str, op: str) -> None:
    check_tensor(x, op, "input")
    check_tensor(indices, op, "indices")
    if not dt.is_int(indices.dtype):
        raise TypeError(f"{op}: indices must be an integer tensor, {indices.name} is {indices.dtype}")
    if mode not in GATHER_MODES:
        raise ValueError(f"{op}: mode must be one of {GATHER_MODES}, got {mode!r}")


def take(x: Tensor, indices: Tensor, axis: int | None = None, mode: str = "raise",
         name: str = "take") -> Tensor:
    """``np.take(x, indices, axis, mode=mode)``: along ``axis`` (``None``: of ``x`` flattened),
    ``out[a..., i..., b...] = x[a..., I[i...], b...]``; the shape is
    ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]``."""
    _check(x, indices, mode, name)
    if axis is None:  # one gather index into the flattened x, unravelled in row-major order
        strides = [prod(x.shape[d + 1:]) for d in range(x.ndim)]

        def flat(ax: tuple[Expr, ...]) -> Expr:
            g = data_index(indices[ax] if ax else indices[()], x.size, mode, x.name, 0)
            return x[tuple(g // s if d == 0 else (g // s) % n
                           for d, (s, n) in enumerate(zip(strides, x.shape)))]

        return new_compute(indices.shape, flat, name, "take")
    axis = normalize_axis(axis, x.ndim, name)
    k = indices.ndim
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]

    def body(ax: tuple[Expr, ...]) -> Expr:
        where = indices[ax[axis:axis + k]] if k else indices[()]
        return x.take(*ax[:axis], where, *ax[axis + k:], mode=mode)

    return new_compute(shape, body, name, "take")


def index_select(x: Tensor, indices: Tensor, axis: int = 0, mode: str = "raise",
                 name: str = "index_select") -> Tensor:
    """``torch.index_select(x, axis, indices)`` for a 1-d ``indices``: ``axis`` of length ``len(indices)``."""
    _check(x, indices, mode, name)
    if indices.ndim != 1:
        raise ValueError(f"{name}: indices must be 1-d, got shape {indices.shape}")
    return take(x, indices, normalize_axis(axis, x.ndim, name), mode, name)


def embedding(weight: Tensor, indices: Tensor, mode: str = "raise", name: str = "embedding") -> Tensor:
    """``torch.nn.functional.embedding(indices, weight)``: ``out[i..., d] = W[I[i...], d]``
    for ``W [vocabulary, dim]`` and integer ``indices`` of any shape."""
    _check(weight, indices, mode, name)
    if weight.ndim != 2:
        raise ValueError(f"{name}: weight must be 2-d [vocabulary, dim], got shape {weight.shape}")
    return take(weight, indices, 0, mode, name)


def embedding_bag(weight: Tensor, indices: Tensor, reduce: str = "mean",
                  per_sample_weights: Tensor | None = None, mode: str = "raise",
                  name: str = "embedding_bag", offsets: Tensor | None = None) -> Tensor:
    """``torch.nn.functional.embedding_bag``: ``out[b, d] = reduce_{k in bag b} W[I[k], d]``
    (``reduce``: ``"sum"`` or ``"mean"``; an empty bag gives zeros), each row scaled by
    ``per_sample_weights`` (the shape of ``indices``; ``"sum"`` only, as in PyTorch).

    Bags of one length: ``indices [bags, n]``, bag ``b`` is row ``b``.  Bags of any lengths, as PyTorch's
    ``offsets``: ``indices [n]`` and ``offsets [bags]`` (integers), bag ``b`` is
    ``indices[offsets[b]:offsets[b + 1]]`` (the last one runs to ``n``).  As in PyTorch the offsets start at 0
    and do not decrease; an index before the first offset belongs to no bag, a run-time ``IndexError``.  Each
    index's bag is found once (``bag[k] = #{b : offsets[b] <= k} - 1``, ``bags * n`` integer work), so the
    bags are a gather and the sum and its gradient are scatter-adds of ``n * dim`` work."""
    _check(weight, indices, mode, name)
    if weight.ndim != 2:
        raise ValueError(f"{name}: weight must be 2-d [vocabulary, dim], got shape {weight.shape}")
    want = "1-d [n] (with offsets)" if offsets is not None else "2-d [bags, bag size]"
    if indices.ndim != (1 if offsets is not None else 2):
        raise ValueError(f"{name}: indices must be {want}, got shape {indices.shape}")
    if offsets is not None:
        check_tensor(offsets, name, "offsets")
        if not dt.is_int(offsets.dtype) or offsets.ndim != 1 or offsets.shape[0] < 1:
            raise ValueError(f"{name}: offsets must be a 1-d integer tensor of at least one bag, "
                             f"got {offsets.dtype} {offsets.shape}")
    if reduce not in ("sum", "mean"):
        raise ValueError(f"{name}: reduce must be 'sum' or 'mean', got {reduce!r}")
    if per_sample_weights is not None:
        check_tensor(per_sample_weights, name, "per_sample_weights")
        if per_sample_weights.shape != indices.shape or per_sample_weights.dtype != weight.dtype:
            raise ValueError(f"{name}: per_sample_weights must be {weight.dtype} of shape "
                             f"{indices.shape}, got {per_sample_weights.dtype} {per_sample_weights.shape}")
        if reduce != "sum":
            raise ValueError(f"{name}: per_sample_weights needs reduce='sum' (as in PyTorch)")
    if offsets is not None:
        return _ragged_bags(weight, indices, offsets, reduce, per_sample_weights, mode, name)
    bags, n = indices.shape

    def body(ax: tuple[Expr, ...]) -> Expr:
        b, d = ax
        k = lang.reduce_axis((0, n), "k")
        row = weight.take(indices[b, k], d, mode=mode)
        if per_sample_weights is not None:
            row = row * per_sample_weights[b, k]
        total = _reducer.sum(row, k)
        return total / const(float(max(n, 1)), weight.dtype) if reduce == "mean" else total

    return new_compute((bags, weight.shape[1]), body, name, "embedding_bag", ("bag", "d"))


def _ragged_bags(weight: Tensor, indices: Tensor, offsets: Tensor, reduce: str,
                 per_sample_weights: Tensor | None, mode: str, name: str) -> Tensor:
    """``embedding_bag`` with ``offsets``: each index's bag as a gather index, then one sum."""
    (n,), (bags,) = indices.shape, offsets.shape
    itype = offsets.dtype

    def bag_of(ax: tuple[Expr, ...]) -> Expr:
        (k,) = ax
        b = lang.reduce_axis((0, bags), "b")
        first = lang.if_then_else(offsets[b] <= k, const(1, itype), const(0, itype))
        return _reducer.sum(first, b) - const(1, itype)

    bag = new_compute((n,), bag_of, f"{name}.bag", "embedding_bag", ("k",))

    def body(ax: tuple[Expr, ...]) -> Expr:
        b, d = ax
        k = lang.reduce_axis((0, n), "k")
        row = weight.take(indices[k], d, mode=mode)
        if per_sample_weights is not None:
            row = row * per_sample_weights[k]
        mine = data_index(bag[k], bags, "raise", f"{name} (the bag of an index before offsets[0])")
        total = _reducer.sum(lang.if_then_else(mine == b, row, const(0, weight.dtype)), k)
        if reduce == "sum":
            return total
        end = lang.if_then_else(b + 1 < bags, offsets[b + 1], const(n, itype))
        size = lang.maximum(end - offsets[b], const(1, itype))
        return total / lang.cast(weight.dtype, size)

    return new_compute((bags, weight.shape[1]), body, name, "embedding_bag", ("bag", "d"))
