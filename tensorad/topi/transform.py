"""Operators that move elements without arithmetic: reshape, transpose, concatenate, split, ...  Pure
index maps written plainly, whose derivatives the optimizer inverts (``//``, ``%``, ``if_then_else``)."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from tensorad.ir import Expr, Tensor, const
from tensorad.lang import if_then_else
from tensorad.lang.sizes import monomial

from ._util import check_tensor, is_int, new_compute, normalize_axes, normalize_axis


def _target_shape(x: Tensor, shape: Any, op: str) -> tuple[int | Expr, ...]:
    """``shape`` with one ``-1`` inferred from ``X``'s size; a mismatch is an error.  An entry of ``X``'s
    shape in sizes (``ta.size_var``) stands in ``shape`` as it is, or in the ``-1``."""
    if is_int(shape) or isinstance(shape, Expr):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(is_int(s) or isinstance(s, Expr) for s in shape):
        raise TypeError(f"{op}: shape must be a sequence of ints, got {shape!r}")
    shape = tuple(shape)
    ints = [s for s in shape if is_int(s)]
    unknown = [d for d, s in enumerate(shape) if is_int(s) and s == -1]
    if len(unknown) > 1 or any(s < -1 for s in ints):
        raise ValueError(f"{op}: bad target shape {shape} (at most one -1, no other negatives)")
    entries = [s for d, s in enumerate(shape) if d not in unknown]
    (size, sized), (known, given) = monomial(x.shape), monomial(entries)
    if unknown and not given - sized:
        if known == 0 or size % known:
            raise ValueError(f"{op}: cannot reshape {x.shape} (size {x.size}) into {shape}")
        rest = prod((sized - given).elements(), start=size // known)
        shape = shape[:unknown[0]] + (rest,) + shape[unknown[0] + 1:]
    elif unknown or known != size or given != sized:
        raise ValueError(f"{op}: cannot reshape {x.shape} (size {x.size}) into {shape} "
                         f"(size {prod(shape)})")
    return shape


def reshape(x: Tensor, shape: Sequence[int], name: str = "reshape") -> Tensor:
    """``X`` with a new shape of the same size, elements in row-major order.

    Leading and trailing axes that keep their size map straight through; the axes in between
    go through the row-major flat index.  Flatten ``[n, c, h, w] -> [n, c*h*w]`` reads
    ``X[i, k // (h*w), (k // w) % h, k % w]``."""
    check_tensor(x, name)
    shape = _target_shape(x, shape, name)
    if prod(shape) == 0:  # nothing to read (the flat index would divide by an extent 0)
        return new_compute(shape, lambda ax: const(0, x.dtype), name, "injective")
    src, dst = x.shape, shape
    pre = 0
    while pre < min(len(src), len(dst)) and src[pre] == dst[pre]:
        pre += 1
    post = 0
    while post < min(len(src), len(dst)) - pre and src[-1 - post] == dst[-1 - post]:
        post += 1
    mid_src, mid_dst = src[pre:len(src) - post], dst[pre:len(dst) - post]

    def body(ax: tuple[Expr, ...]) -> Expr:
        mid_ax = ax[pre:len(ax) - post]
        flat: Expr | None = None
        for a, s in zip(mid_ax, mid_dst):  # row-major flat index of the middle axes
            flat = a if flat is None else flat * s + a
        idx: list[Expr | int] = []
        for d, s in enumerate(mid_src):
            stride = prod(mid_src[d + 1:])
            if s == 1:
                idx.append(0)
                continue
            e = flat if stride == 1 else flat // stride
            # the first non-unit axis needs no modulo: flat // stride < s already
            if any(t != 1 for t in mid_src[:d]):
                e = e % s
            idx.append(e)
        return x[tuple(ax[:pre]) + tuple(idx) + tuple(ax[len(ax) - post:])]

    return new_compute(shape, body, name, "injective")


def transpose(x: Tensor, axes: Sequence[int] | None = None, name: str = "transpose") -> Tensor:
    """``Y[o...] = X[...]`` with output axis ``d`` being input axis ``axes[d]`` (default: reversed)."""
    check_tensor(x, name)
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        if not isinstance(axes, (tuple, list)):
            raise TypeError(f"{name}: axes must be a sequence of ints, got {axes!r}")
        perm = tuple(normalize_axis(a, x.ndim, name) for a in axes)
        if sorted(perm) != list(range(x.ndim)):
            raise ValueError(f"{name}: axes {tuple(axes)} are not a permutation of the "
                             f"{x.ndim} axes of {x.name}")

    def body(ax: tuple[Expr, ...]) -> Expr:
        idx: list[Expr] = [ax[0]] * x.ndim
        for d, p in enumerate(perm):
            idx[p] = ax[d]
        return x[tuple(idx)]

    return new_compute(tuple(x.shape[p] for p in perm), body, name, "injective")


def index(x: Tensor, key: Any, name: str | None = None) -> Tensor:
    """``x[key]`` with NumPy's basic indexing, as a view written in the language: integers
    (negative from the end; the axis goes), slices of any step (``1:-1``, ``::2``, ``::-1``),
    one ``...`` and ``None`` (a new axis of size 1).  ``Tensor.__getitem__`` calls this when its
    key holds a slice, ``...`` or ``None``, or is all integers and shorter than the rank."""
    name = name or f"{getattr(x, 'name', 'x')}_view"
    check_tensor(x, name)
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError(f"{name}: {x.name}[...] may hold one '...', got {len(key)} entries with more")
    used = sum(k is not None and k is not Ellipsis for k in key)
    if used > x.ndim:
        raise IndexError(f"{name}: {x.name} has {x.ndim} dimensions {x.shape} but is indexed with {used}")
    fill = (slice(None),) * (x.ndim - used)
    key = (*key, *fill) if Ellipsis not in key else \
        tuple(e for k in key for e in (fill if k is Ellipsis else (k,)))
    shape: list[int] = []
    source: list = []  # per input axis: an integer, or (output axis, start, step)
    axis = 0
    for k in key:
        if k is None:
            shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            source.append((len(shape), start, step))
            shape.append(len(range(start, stop, step)))
        elif is_int(k) or (hasattr(k, "__index__") and not isinstance(k, (bool, Expr))):
            i = int(k.__index__())
            if not -n <= i < n:
                raise IndexError(f"{name}: index {i} is out of range for axis {axis} of {x.name}, "
                                 f"of size {n}")
            source.append(i % n)
        else:
            raise TypeError(f"{name}: {x.name}[...] as a view takes integers, slices, '...' and None; "
                            f"got {k!r}.  An index expression reads an element inside ta.compute, "
                            f"with every dimension indexed: {x.name}[i, j]")
        axis += 1
    if 0 in shape:
        raise IndexError(f"{name}: {x.name}{list(key)} selects no element (shape {tuple(shape)})")

    def at(out_axis: Expr, start: int, step: int) -> Expr:
        scaled = out_axis if step == 1 else out_axis * step
        return scaled + start if start else scaled

    def body(ax: tuple[Expr, ...]) -> Expr:
        return x[tuple(s if isinstance(s, int) else at(ax[s[0]], s[1], s[2]) for s in source)]

    return new_compute(tuple(shape), body, name, "injective")


def strided_slice(x: Tensor, begin: Sequence[int], end: Sequence[int],
                  strides: Sequence[int] | None = None, axes: Sequence[int] | None = None,
                  name: str = "strided_slice") -> Tensor:
    """``x[begin[k]:end[k]:strides[k]]`` along ``axes`` (the first ``len(begin)`` axes by
    default), Python's rules for negative and out-of-range bounds: :func:`index` of slices."""
    check_tensor(x, name)
    axes = range(len(begin)) if axes is None else [normalize_axis(a, x.ndim, name) for a in axes]
    strides = [1] * len(begin) if strides is None else list(strides)
    if not len(begin) == len(end) == len(strides) == len(axes):
        raise ValueError(f"{name}: begin, end, strides and axes must have one entry per sliced axis")
    key = [slice(None)] * x.ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        key[a] = slice(b, e, s)
    return index(x, tuple(key), name)


def expand_dims(x: Tensor, axis: int, num_newaxis: int = 1, name: str = "expand_dims") -> Tensor:
    """``X`` with ``num_newaxis`` axes of size 1 inserted at ``axis`` (of the result)."""
    check_tensor(x, name)
    axis = normalize_axis(axis, x.ndim + 1, name)
    shape = x.shape[:axis] + (1,) * num_newaxis + x.shape[axis:]
    return new_compute(shape, lambda ax: x[ax[:axis] + ax[axis + num_newaxis:]], name, "injective")


def squeeze(x: Tensor, axis: Any = None, name: str = "squeeze") -> Tensor:
    """``X`` without size-1 axes (all of them, or those listed in ``axis``)."""
    check_tensor(x, name)
    if axis is None:
        drop = tuple(d for d, s in enumerate(x.shape) if s == 1)
    else:
        drop = normalize_axes(axis, x.ndim, name)
        for d in drop:
            if x.shape[d] != 1:
                raise ValueError(f"{name}: axis {d} of {x.name} {x.shape} has size {x.shape[d]}, not 1")
    keep = [d for d in range(x.ndim) if d not in drop]

    def body(ax: tuple[Expr, ...]) -> Expr:
        idx: list[Expr | int] = [0] * x.ndim
        for d, a in zip(keep, ax):
            idx[d] = a
        return x[tuple(idx)]

    return new_compute(tuple(x.shape[d] for d in keep), body, name, "injective")


def concatenate(tensors: Sequence[Tensor], axis: int = 0, name: str = "concatenate") -> Tensor:
    """The tensors joined along ``axis``; every other axis must agree.

    ``Y[..., j, ...] = if_then_else(j < n0, T0[..., j, ...], if_then_else(j < n0 + n1,
    T1[..., j - n0, ...], ...))``: only the branch that holds reads, so no read leaves bounds."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (tuple, list)) or not tensors:
        raise TypeError(f"{name}: expects a nonempty list of tensors, got {tensors!r}")
    for t in tensors:
        check_tensor(t, name, "every element")
    first = tensors[0]
    axis = normalize_axis(axis, first.ndim, name)
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape))
                                       if d != axis):
            raise ValueError(f"{name}: shapes {first.shape} ({first.name}) and {t.shape} ({t.name}) "
                             f"differ outside axis {axis}")
    parts = [t for t in tensors if isinstance(t.shape[axis], Expr) or t.shape[axis] > 0] or [first]
    offsets = [0]
    for t in parts:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = first.shape[:axis] + (offsets[-1],) + first.shape[axis + 1:]

    def body(ax: tuple[Expr, ...]) -> Expr:
        j = ax[axis]

        def part(p: int) -> Expr:
            shifted = j - offsets[p] if isinstance(offsets[p], Expr) or offsets[p] else j
            return parts[p][ax[:axis] + (shifted,) + ax[axis + 1:]]

        out = part(len(parts) - 1)
        for p in range(len(parts) - 2, -1, -1):
            out = if_then_else(j < offsets[p + 1], part(p), out)
        return out

    return new_compute(shape, body, name, "injective")


def split(x: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0,
          name: str = "split") -> list[Tensor]:
    """``X`` cut along ``axis``: into ``n`` equal parts (an int), or at the given indices.

    ``split(X, [2, 5])`` on an axis of size 7 gives the pieces ``[0, 2)``, ``[2, 5)``, ``[5, 7)``;
    piece ``p`` reads ``X[..., j + start_p, ...]``."""
    check_tensor(x, name)
    axis = normalize_axis(axis, x.ndim, name)
    n = x.shape[axis]
    if is_int(indices_or_sections):
        sections = indices_or_sections
        if sections <= 0 or n % sections:
            raise ValueError(f"{name}: axis {axis} of size {n} cannot be split into "
                             f"{sections} equal sections")
        bounds = [n // sections * p for p in range(sections + 1)]
    elif isinstance(indices_or_sections, (tuple, list)) and all(is_int(i) for i in indices_or_sections):
        cuts = list(indices_or_sections)
        if any(not 0 <= c <= n for c in cuts) or cuts != sorted(cuts):
            raise ValueError(f"{name}: split indices {cuts} must be nondecreasing in [0, {n}]")
        bounds = [0] + cuts + [n]
    else:
        raise TypeError(f"{name}: indices_or_sections must be an int or a list of ints, "
                        f"got {indices_or_sections!r}")
    out = []
    for p, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        shape = x.shape[:axis] + (hi - lo,) + x.shape[axis + 1:]

        def body(ax: tuple[Expr, ...], lo: int = lo) -> Expr:
            return x[ax[:axis] + (ax[axis] + lo if lo else ax[axis],) + ax[axis + 1:]]

        out.append(new_compute(shape, body, f"{name}.{p}", "injective"))
    return out
