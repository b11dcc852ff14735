"""The last two axes of an elementwise nest scanned as one loop, when its rows are short.

Over a small feature map LLVM sees a short inner loop, unrolls it and vectorizes the outer one at a
stride.  Scanning ``t = y * E_x + x`` instead (``for y.x in range(0, 784): Y[.., y.x // 28, y.x % 28] =
...``) gives one unit-stride loop whose addresses :func:`.llvm.expr.recombine_digits` emits as ``t * s``.
It applies only when ``y`` and ``x`` are the op's last two axes, of rectangular ranges ``[0, E_y)`` and
``[0, E_x)``, not split into digits; every read uses them only as adjacent dimensions at strides
``(E_x, 1)``, or not at all; and ``E_x`` is not a whole number of the vectorized loop's ``block`` and is
below :data:`SHORT_BLOCKS` of them.  The work is unchanged."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op, const, var
from tensorad.ir.rewrite import free_vars, replace_reads, walk
from tensorad.ir.tensor import ComputeOp

from ..strategies.registry import PointwiseNest
from ..target import Target
from .schedule import strides
from .stripmine import AxisSplit

SHORT_BLOCKS = 8  # rows of at least this many vector-loop iterations are long enough
INTERLEAVE = 4  # vectors per iteration of LLVM's vectorized loop (its interleave count)


def vector_block(target: Target, dtype: str) -> int:
    """Elements one iteration of a vectorized loop over ``dtype`` handles on ``target``."""
    try:
        lanes = target.lanes(dtype)
    except ValueError:  # bool and other narrow types: as wide as int32
        lanes = target.lanes("int32")
    return INTERLEAVE * lanes


def short_rows(extent: int, block: int) -> bool:
    """Whether a contiguous inner loop of ``extent`` trips runs poorly alone: not a whole number of
    ``block``-element vector iterations, and fewer than :data:`SHORT_BLOCKS` of them."""
    return extent % block != 0 and extent < SHORT_BLOCKS * block


def _contiguous_pair(bodies: tuple[Expr, ...], a: Expr, b: Expr) -> bool:
    """Whether every read of ``bodies`` walks ``a, b`` as one run or not at all, and nothing else does."""
    pair = {a, b}
    for n in (n for e in bodies for n in walk(e) if n.op is Op.READ):
        at = [d for d, i in enumerate(n.src) if i in pair]
        if at:
            st = strides(n.arg)
            d = at[0]
            if len(at) != 2 or at[1] != d + 1 or n.src[d] is not a or n.src[d + 1] is not b \
                    or st[d + 1] != 1 or st[d] != b.extent or n.arg.shape[d] < a.extent:
                return False  # (a wider map's rows, ``X[.., y, x]`` of 28 x 30; a transpose's
                # strided run, ``X[y, x, n]``: a gather either way, nothing to gain)
        if any(pair & set(free_vars(i)) for i in n.src if i not in pair):
            return False
    rest = [replace_reads(e, lambda n: const(0, n.dtype)) for e in bodies]
    return not any(pair & set(free_vars(e)) for e in rest)


def coalesce_split(op: ComputeOp, bodies: tuple[Expr, ...], split: AxisSplit | None, block: int
                   ) -> AxisSplit | None:
    """``split`` (:func:`.loops.stripmine.plan_split`'s, or ``None``) with ``op``'s last two axes as one
    variable when the module docstring's conditions hold."""
    if op.is_reduction or len(op.axes) < 2:
        return split
    a, b = op.axes[-2], op.axes[-1]
    if a.lo != 0 or b.lo != 0 or a.extent < 2 or b.extent < 2 or not short_rows(b.extent, block):
        return split
    if split is not None and (split.vars[-2:] != (a, b) or a in split.value or b in split.value):
        return split  # (a digit split of the pair itself: its reads divide it)
    if not _contiguous_pair(bodies, a, b):
        return split
    t = var(f"{a.name}.{b.name}", 0, a.extent * b.extent)
    e = const(b.extent, t.dtype)
    vars_ = (split.vars if split is not None else tuple(op.axes))[:-2] + (t,)
    value = dict(split.value) if split is not None else {}
    value.update({a: t // e, b: t % e})
    digit_of = dict(split.digit_of) if split is not None else {x: x for x in op.axes}
    digit_of.pop(a, None)
    digit_of.pop(b, None)
    digit_of[t] = a * const(b.extent, a.dtype) + b
    if split is None:
        return AxisSplit(vars_, value, (), digit_of, (), (), merged=((a, b),))
    return AxisSplit(vars_, value, split.constraints, digit_of, split.remainders, split.tops,
                     merged=split.merged + ((a, b),))


def unit_split(unit, bodies: tuple[Expr, ...], tau: tuple[Expr, ...], target: Target) -> AxisSplit | None:
    """The split an elementwise unit (:class:`.loops.nest_groups.Unit`) is lowered with: its own digit
    split, plus its last two axes as one loop when :func:`coalesce_split` allows and neither is in ``tau``."""
    op, plan = unit.op, unit.plan
    if not isinstance(plan, PointwiseNest):
        return None
    if len(op.axes) < 2 or set(op.axes[-2:]) & set(tau):
        return plan.split
    return coalesce_split(op, bodies, plan.split, vector_block(target, op.body[0].dtype))


def only_merged(split: AxisSplit | None) -> bool:
    """Whether ``split`` only scans pairs of axes as one (no digits): a variable per axis, in order."""
    return split is not None and bool(split.merged) and len(split.value) == 2 * len(split.merged)
