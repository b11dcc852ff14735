"""Padded copies for guarded sides of a contraction.

A convolution's input gradient reads the head inside a window that leaves it at the borders (``if_then_else(0
<= y - ry < 26 && 0 <= x - rx < 26, H[n, f, y - ry, x - rx], 0)``).  When the guard says exactly "the read is
in bounds", the side is a plain read of a zero-padded copy ``Hp[n, f, y - ry + 2, x - rx + 2]``.  A side that
tests a mask at each element (a ReLU-masked head) is copied likewise, without padding, when packing it once
per column block would cost more; so is any computed side that packing would compute more than once per point
(:func:`computed_copy`).  A temporary never outgrows the kernel's arguments: when the copy would, and the
read's first index is the first batch axis, the batch is done in *chunks* sharing one buffer."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorad.simplify.algebra.rules import is_zero

from tensorad.ir.expr import Expr, Op, choice, compare, const, logical, var
from tensorad.ir.rewrite import free_vars, replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.domain import pw_aff_range

MAX_GROWTH = 4.0  # the copy's size over the tensor's


@dataclass(frozen=True, eq=False)
class Padding:
    """A side ``if_then_else(in_bounds(T[idx]), v, 0)`` and its padding per dimension, ``v`` being
    ``T[idx]`` or a pointwise expression of reads all at ``idx`` (``read`` the first)."""

    read: Expr
    lows: tuple[int, ...]
    highs: tuple[int, ...]
    value: Expr | None = None  # None: the read itself

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s + lo + hi for s, lo, hi in zip(self.read.arg.shape, self.lows, self.highs))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def copy(self, first: int = 0, count: int | None = None) -> tuple[ComputeOp, Expr]:
        """``(op, side)``: the padded copy of rows ``[first, first + count)`` (default all), its reader."""
        t: Tensor = self.read.arg
        shape = self.shape
        if count is not None:
            shape = (count,) + shape[1:]
        paxes = tuple(var(f"p{d}", 0, s) for d, s in enumerate(shape))
        checks = None
        for p, lo, hi, size in zip(paxes, self.lows, self.highs, t.shape):
            if lo or hi:
                c = logical(Op.AND, compare(Op.GE, p, const(lo)), compare(Op.LT, p, const(lo + size)))
                checks = c if checks is None else logical(Op.AND, checks, c)
        offsets = [-lo for lo in self.lows]
        offsets[0] += first
        src = tuple(p + const(o) if o else p for p, o in zip(paxes, offsets))
        dtype = self.read.dtype
        value = Expr(Op.READ, dtype, src, t)
        if self.value is not None:
            value = replace_reads(self.value, lambda n: Expr(Op.READ, n.dtype, src, n.arg))
            dtype = value.dtype
        if checks is not None:
            value = choice(Op.IF_THEN_ELSE, checks, value, const(0, dtype))
        name = f"{t.name}.padded" if count is None and not first else f"{t.name}.padded{first}"
        op = ComputeOp(name, "", paxes, (value,), (("padded_from", first),))
        shifts = [lo for lo in self.lows]
        shifts[0] -= first
        idx = tuple(i + const(s, i.dtype) if s else i for i, s in zip(self.read.src, shifts))
        return op, Expr(Op.READ, dtype, idx, Tensor(op, 0))


def pointwise_read(value: Expr) -> Expr | None:
    """The first read of ``value`` when every read in it is at one index of tensors of one shape and no
    variable appears outside those indices, else ``None``."""
    reads = [n for n in walk(value) if n.op is Op.READ]
    if not reads or any(r.src != reads[0].src or r.arg.shape != reads[0].arg.shape for r in reads):
        return None
    outside = replace_reads(value, lambda n: const(0, n.dtype))  # what is left besides the reads
    return None if free_vars(outside) else reads[0]


def computed_copy(side: Expr, axes: tuple[Expr, ...], name: str) -> tuple[ComputeOp, Expr]:
    """``(op, side)``: a computed side stored once over the box of the ``axes`` it reads (from 0 up), and
    its read, where packing it would compute each of its points more than once."""
    used = set(free_vars(side))
    kept = [a for a in axes if a in used]
    paxes = tuple(var(f"p{d}", 0, a.extent) for d, a in enumerate(kept))
    body = substitute(side, {a: p + const(a.lo, a.dtype) if a.lo else p for a, p in zip(kept, paxes)})
    op = ComputeOp(name, "", paxes, (body,))
    idx = tuple(a - const(a.lo, a.dtype) if a.lo else a for a in kept)
    return op, Expr(Op.READ, side.dtype, idx, Tensor(op, 0))


def _masked_copy(side: Expr) -> Padding | None:
    """An unpadded copy of ``side`` when it is a masked pointwise value
    (``if_then_else(Y[idx] > 0, H[idx], 0)``): the packers read plain values, not the mask per block."""
    if side.op not in (Op.IF_THEN_ELSE, Op.SELECT):
        return None
    read = pointwise_read(side)
    return None if read is None else Padding(read, (0,) * len(read.src), (0,) * len(read.src), side)


def plan_padding(side: Expr, axes: tuple[Expr, ...]) -> Padding | None:
    """The :class:`Padding` of ``side`` over the box of ``axes``, or ``None`` when the side is neither a
    read guarded by exactly its bounds nor a masked pointwise value, or needs no copy."""
    if side.op is not Op.IF_THEN_ELSE or not is_zero(side.src[2]):
        return _masked_copy(side)
    cond, value = side.src[0], side.src[1]
    read = value if value.op is Op.READ else pointwise_read(value)
    if read is None:
        return None
    t: Tensor = read.arg
    space = IndexSpace(axes)
    box = space.box()
    try:
        guarded = box.intersect(space.cond(cond))
        affs = [space.aff(i) for i in read.src]
    except NotAffine:
        return _masked_copy(side)
    inside = box
    lows, highs = [], []
    for pa, size in zip(affs, t.shape):
        inside = inside.intersect(pa.ge_set(space.constant(0))).intersect(pa.lt_set(space.constant(size)))
        first, last = pw_aff_range(pa.intersect_domain(box))
        lows.append(max(0, -first))
        highs.append(max(0, last - (size - 1)))
    if not guarded.is_equal(inside):
        return None
    if not any(lows) and not any(highs):
        return _masked_copy(side)
    plan = Padding(read, tuple(lows), tuple(highs), None if value is read else value)
    return plan if plan.size <= MAX_GROWTH * t.size else None


__all__ = ["Padding", "computed_copy", "plan_padding", "pointwise_read"]
