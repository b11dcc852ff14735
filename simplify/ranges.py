"""Interval bounds of integer index expressions, from the ranges of their variables.

``bounds(e)`` is ``(lo, hi)``, inclusive, with ``None`` for "unbounded".  It is the cheap
half of deciding comparisons (``i + 1 <= 10`` for ``i`` in ``[0, 10)`` is true by intervals
alone); what intervals cannot decide, isl can (see :mod:`.eliminate`).  Results are memoized
per node within one call (``memo``): nodes are hash-consed and variable ranges never change.
"""

from __future__ import annotations

import math

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import fold_along
from tensorad.poly.linear import int_constant

Bound = tuple["int | None", "int | None"]
_UNBOUNDED: Bound = (None, None)


def _add(a: Bound, b: Bound) -> Bound:
    lo = None if a[0] is None or b[0] is None else a[0] + b[0]
    hi = None if a[1] is None or b[1] is None else a[1] + b[1]
    return lo, hi


def _neg(a: Bound) -> Bound:
    return (None if a[1] is None else -a[1], None if a[0] is None else -a[0])


def _scale(a: Bound, c: int) -> Bound:
    lo = None if a[0] is None else a[0] * c
    hi = None if a[1] is None else a[1] * c
    return (lo, hi) if c >= 0 else (hi, lo)


def _floordiv(a: Bound, c: int) -> Bound:
    return (None if a[0] is None else a[0] // c, None if a[1] is None else a[1] // c)


def _mod(a: Bound, c: int) -> Bound:
    if a[0] is not None and a[1] is not None and a[0] // c == a[1] // c:
        return a[0] % c, a[1] % c  # the whole interval lies in one period
    return 0, c - 1


def _minmax(a: Bound, b: Bound, f) -> Bound:
    lo = None if a[0] is None or b[0] is None else f(a[0], b[0])
    hi = None if a[1] is None or b[1] is None else f(a[1], b[1])
    if f is max:  # max(x, y) >= each operand's lower bound even when the other is unbounded
        lo = a[0] if b[0] is None else b[0] if a[0] is None else lo
    else:
        hi = a[1] if b[1] is None else b[1] if a[1] is None else hi
    return lo, hi


def _union(a: Bound, b: Bound) -> Bound:
    lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
    hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
    return lo, hi


def _compute(e: Expr, memo: dict) -> Bound:
    op = e.op
    if op is Op.CONST:
        c = int_constant(e)
        return (c, c) if c is not None else (math.floor(e.arg), math.ceil(e.arg))
    if op is Op.VAR:
        return (e.lo, e.hi - 1) if e.lo is not None and e.hi is not None else _UNBOUNDED
    if op is Op.ADD:
        return _add(bounds(e.src[0], memo), bounds(e.src[1], memo))
    if op is Op.SUB:
        return _add(bounds(e.src[0], memo), _neg(bounds(e.src[1], memo)))
    if op is Op.NEG:
        return _neg(bounds(e.src[0], memo))
    if op is Op.MUL:
        a, b = e.src
        if int_constant(a) is not None:
            return _scale(bounds(b, memo), int_constant(a))
        if int_constant(b) is not None:
            return _scale(bounds(a, memo), int_constant(b))
        return _UNBOUNDED
    if op in (Op.FLOORDIV, Op.MOD):
        c = int_constant(e.src[1])
        if c is None or c <= 0:
            return _UNBOUNDED
        a = bounds(e.src[0], memo)
        return _floordiv(a, c) if op is Op.FLOORDIV else _mod(a, c)
    if op is Op.MAXIMUM:
        return _minmax(bounds(e.src[0], memo), bounds(e.src[1], memo), max)
    if op is Op.MINIMUM:
        return _minmax(bounds(e.src[0], memo), bounds(e.src[1], memo), min)
    if op in (Op.SELECT, Op.IF_THEN_ELSE):
        return _union(bounds(e.src[1], memo), bounds(e.src[2], memo))
    if op is Op.CAST and dt.is_int(e.src[0].dtype):
        return bounds(e.src[0], memo)
    if op is Op.CAST and e.src[0].dtype == dt.BOOL:
        return 0, 1
    if op is Op.DATA_INDEX:  # a gather index: checked, clipped or wrapped into [0, extent)
        return 0, e.arg.extent - 1
    return _UNBOUNDED


def _operands(e: Expr) -> tuple[Expr, ...]:
    """The operands whose bounds :func:`_compute` reads."""
    if not dt.is_int(e.dtype):
        return ()
    op = e.op
    if op in (Op.ADD, Op.SUB, Op.NEG, Op.MUL, Op.MAXIMUM, Op.MINIMUM):
        return e.src
    if op in (Op.FLOORDIV, Op.MOD):
        return e.src[:1]
    if op in (Op.SELECT, Op.IF_THEN_ELSE):
        return e.src[1:]
    if op is Op.CAST and dt.is_int(e.src[0].dtype):
        return e.src
    return ()


def bounds(e: Expr, memo: dict | None = None) -> Bound:
    """Inclusive ``(lo, hi)`` of integer expression ``e`` (``None``: unbounded that side).
    Iterative (operands first), so an expression of any depth takes no Python recursion."""
    memo = {} if memo is None else memo
    found = memo.get(e)
    if found is None:
        found = fold_along(e, _operands, lambda n: _compute(n, memo) if dt.is_int(n.dtype) else _UNBOUNDED,
                           memo)
    return found


def within(e: Expr, lo: int, hi: int) -> bool:
    """Whether ``lo <= e <= hi`` holds for every value of the variables."""
    b = bounds(e)
    return b[0] is not None and b[1] is not None and lo <= b[0] and b[1] <= hi


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def wraps_where_stored(body: Expr) -> bool:
    """Whether an ``int32`` tensor's ``body`` may hold a value its store wraps: it computes
    exactly in 64 bits (an index variable or an ``int64`` value among its operands) and its
    bounds are not within int32.  Such a tensor is not inlined into its readers -- its value
    would then be the exact one there and the wrapped one where stored (fuzz seed 6116:
    ``int32(i * -3 - 2) - int32(x * 1e10)`` summed to 18 inlined, 45 stored)."""
    if body.dtype != "int32" or within(body, INT32_MIN, INT32_MAX):
        return False
    from tensorad.ir.rewrite import walk

    return any(n.op is Op.VAR or n.dtype == "int64" or n.op is Op.CONST and n.dtype == "int32"
               and not INT32_MIN <= int(n.arg) <= INT32_MAX for n in walk(body))
