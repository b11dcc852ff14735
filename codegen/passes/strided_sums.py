"""Strided reduction axes: a sum that only counts one residue class of an axis, re-indexed.

A stride-2 transposed convolution's weight gradient sums over the points of the zero-dilated input that
hold a value::

    dW[c, f, i, j] = sum_{n, y, x : y % 2 == 0 && x % 2 == 0} H[n, f, i + y, j + x] * X[n, c, y // 2, x // 2]

A conjunct ``(a k + c) % m == r``, ``k`` a reduction axis, ``a = +-1`` and no other variable, holds
exactly on ``k = m k' + k0`` (``k0 = a (r - c) mod m``, the least such point ``>= lo``), so the sum runs
over ``k'`` without the conjunct.  The terms and their order are unchanged: bit for bit the same.

A reduction axis read only through ``//`` and ``%`` by constants whose chain divides its extent (a row
of ``X`` viewed flat, ``X[r // 784, (r // 28) % 28, r % 28]``) is summed over its digits instead, one
axis per digit, most significant first, so that no division is left in the loops over it
(:func:`split_digits`, :mod:`.loops.stripmine`'s split of a reduction's axes).  The points and their
order are unchanged.  A matrix product (a flatten then a dense layer, ``sum_k X[b, k // 256, (k // 16) % 16,
k % 16] * W[o, k]``) keeps its flat ``k``: its strategies (the micro-kernel, strips of the output) walk
``k`` whole, and its digits would leave short loops over a row of ``W``.  So does a scan whose combiner
keeps the loop's order (an exclusive prefix product along a box's flat points): its digits are two
reduction axes, which no ordered scan carries."""

from __future__ import annotations

from tensorad.simplify.algebra.logic import all_of, conjuncts

from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import substitute
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.linear import var_coefficients
from tensorad.poly.nesting import running_order

from ..gemm.contraction import match_contraction
from ..loops.stripmine import plan_split, simplify_index
from ..strategies.scan import any_order
from ..target import Target


def _residue(c: Expr, axes: tuple[Expr, ...]) -> tuple[Expr, int, int] | None:
    """``(k, m, k0)`` when ``c`` is ``(a k + c0) % m == r`` with ``k`` one of ``axes``, ``a = +-1``,
    ``m > 1`` and ``0 <= r < m``: ``c`` holds iff ``k % m == k0``."""
    if c.op is not Op.EQ:
        return None
    lhs, rhs = c.src
    if lhs.op is Op.CONST:
        lhs, rhs = rhs, lhs
    if lhs.op is not Op.MOD or rhs.op is not Op.CONST or lhs.src[1].op is not Op.CONST:
        return None
    m, r = int(lhs.src[1].arg), int(rhs.arg)
    co = var_coefficients(lhs.src[0])
    if m <= 1 or not 0 <= r < m or co is None:
        return None
    terms = {v: a for v, a in co.items() if v is not None and a}
    if len(terms) != 1:
        return None
    (k, a), = terms.items()
    return None if k not in axes or a not in (1, -1) else (k, m, (a * (r - co.get(None, 0))) % m)


def unstride(red: Expr) -> Expr:
    """``red`` (a ``REDUCE``) with every reduction axis that its condition restricts to one
    residue class re-indexed over that class alone; anything else is returned unchanged."""
    if red.op is not Op.REDUCE:
        return red
    ra: ReduceArg = red.arg
    parts = conjuncts(red.src[0])
    mapping: dict[Expr, Expr] = {}
    fresh: dict[Expr, Expr] = {}
    kept = []
    for c in parts:
        found = _residue(c, ra.axes)
        if found is None or found[0] in mapping:
            kept.append(c)
            continue
        k, m, k0 = found
        first = k.lo + (k0 - k.lo) % m  # the least point >= lo in the class
        if first >= k.hi:
            kept.append(c)  # (an empty sum: left to the loops)
            continue
        q = var(k.name, 0, (k.hi - 1 - first) // m + 1, k.dtype)
        fresh[k] = q
        step = q * const(m, k.dtype)
        mapping[k] = step + const(first, k.dtype) if first else step
    if not mapping:
        return red
    cond = all_of(simplify_index(substitute(c, mapping)) for c in kept)
    src = tuple(simplify_index(substitute(s, mapping)) for s in red.src[1:])
    axes = tuple(fresh.get(k, k) for k in ra.axes)
    return Expr(Op.REDUCE, red.dtype, (cond,) + src, ReduceArg(ra.combiner, axes, ra.value_index))


def split_digits(op: ComputeOp, bodies: tuple[Expr, ...], target: Target) -> tuple[Expr, ...]:
    """``bodies`` (``op``'s, all ``REDUCE`` over the same axes) summed over the digits of every
    reduction axis read through ``//`` and ``%`` whose divisors divide its extent; unchanged if they
    are not, if ``op`` is a matrix product (:func:`.gemm.contraction.match_contraction`), or an ordered
    running reduction (:func:`~tensorad.poly.nesting.running_order`) of a combiner kept in order."""
    if not bodies or any(b.op is not Op.REDUCE or b.arg.axes != bodies[0].arg.axes for b in bodies):
        return bodies
    if match_contraction(op, bodies, None, target) is not None:
        return bodies
    axes, (cond, *srcs) = bodies[0].arg.axes, bodies[0].src
    split = plan_split(axes, bodies)
    if split is None or split.constraints or not any_order(bodies[0].arg.combiner) \
            and running_order(op.axes, axes, cond, srcs) is not None:
        return tuple(Expr(Op.REDUCE, b.dtype, tuple(simplify_index(s) for s in b.src), b.arg) for b in bodies)
    out = []
    for b in bodies:
        src = tuple(split.apply(s) for s in b.src)
        out.append(Expr(Op.REDUCE, b.dtype, src, ReduceArg(b.arg.combiner, split.vars, b.arg.value_index)))
    return tuple(out)
