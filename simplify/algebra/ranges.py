"""Interval bounds of integer index expressions, from the ranges of their variables.

``bounds(e)`` is ``(lo, hi)``, inclusive, ``None`` for unbounded: the cheap half of deciding comparisons
(isl is the other, :mod:`.sums.eliminate`).  A linear form's bounds over the box of its atoms are exact
(:func:`linear_bounds`); the atoms (``//``, ``%``, max/min, choices, casts) have rules here (``memo``)."""

from __future__ import annotations

import math
from collections.abc import Callable

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, is_size
from tensorad.ir.intrange import wraps_where_stored as _wraps_where_stored
from tensorad.ir.rewrite import fold_along
from tensorad.poly.linear import Linear, int_constant, to_linear

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


def linear_bounds(f: Linear, atom: Callable[[Expr], Bound]) -> Bound:
    """Exact bounds of ``c0 + sum(k * atom)`` from each atom's bounds (every atom occurs once in a form)."""
    lo = hi = f.const
    for a, k in f.terms:
        a_lo, a_hi = atom(a)
        if k < 0:
            a_lo, a_hi = (None if a_hi is None else -a_hi), (None if a_lo is None else -a_lo)
            k = -k
        lo = None if lo is None or a_lo is None else lo + k * a_lo
        hi = None if hi is None or a_hi is None else hi + k * a_hi
    return lo, hi


def _is_atom(e: Expr, form: Linear) -> bool:
    return len(form.terms) == 1 and form.terms[0] == (e, 1) and form.const == 0


def _atom(e: Expr, memo: dict) -> Bound:
    """Bounds of a node that is not integer ``+ - *`` by a constant (operands in ``memo``)."""
    op = e.op
    if op is Op.CONST:
        c = int_constant(e)
        return (c, c) if c is not None else (math.floor(e.arg), math.ceil(e.arg))
    if op is Op.VAR:  # a size: its admissible values; bounds in sizes: their own bounds
        if is_size(e):
            return e.arg.min, e.arg.max
        if e.lo is None or e.hi is None:
            return _UNBOUNDED
        hi = memo[e.hi][1] if isinstance(e.hi, Expr) else e.hi
        return memo[e.lo][0] if isinstance(e.lo, Expr) else e.lo, None if hi is None else hi - 1
    if op in (Op.FLOORDIV, Op.MOD):
        c = int_constant(e.src[1])
        if c is None or c <= 0:
            return _UNBOUNDED
        a = memo[e.src[0]]
        return _floordiv(a, c) if op is Op.FLOORDIV else _mod(a, c)
    if op is Op.MAXIMUM:
        return _minmax(memo[e.src[0]], memo[e.src[1]], max)
    if op is Op.MINIMUM:
        return _minmax(memo[e.src[0]], memo[e.src[1]], min)
    if op in (Op.SELECT, Op.IF_THEN_ELSE):
        return _union(memo[e.src[1]], memo[e.src[2]])
    if op is Op.CAST and dt.is_int(e.src[0].dtype):
        lo, hi = memo[e.src[0]]
        if dt.narrows(e.src[0].dtype, e.dtype) and (
                lo is None or hi is None or lo < dt.min_value(e.dtype) or hi > dt.max_value(e.dtype)):
            return dt.min_value(e.dtype), dt.max_value(e.dtype)  # it wraps: anything of its type
        return lo, hi
    if op is Op.CAST and e.src[0].dtype == dt.BOOL:
        return 0, 1
    if op is Op.DATA_INDEX:  # a gather index: checked, clipped or wrapped into [0, extent)
        hi = memo[e.arg.extent][1] if isinstance(e.arg.extent, Expr) else e.arg.extent
        return 0, None if hi is None else hi - 1
    return _UNBOUNDED  # a read of data, a product of two variables, ...


class _Bounds:
    """One bounds computation: ``memo`` (node -> bounds) and ``forms`` (node -> linear form)."""

    def __init__(self, memo: dict, forms: dict | None) -> None:
        self.memo, self.forms = memo, {} if forms is None else forms

    def operands(self, e: Expr) -> tuple[Expr, ...]:
        """What :meth:`visit` reads: a linear node's atoms, an atom's operands."""
        if not dt.is_int(e.dtype):
            return ()
        form = to_linear(e, self.forms)
        if not _is_atom(e, form):
            return tuple(a for a, _ in form.terms)
        op = e.op
        if op in (Op.MAXIMUM, Op.MINIMUM):
            return e.src
        if op is Op.VAR:
            return tuple(b for b in (e.lo, e.hi) if isinstance(b, Expr))
        if op is Op.DATA_INDEX and isinstance(e.arg.extent, Expr):
            return (e.arg.extent,)
        if op in (Op.FLOORDIV, Op.MOD):
            return e.src[:1]
        if op in (Op.SELECT, Op.IF_THEN_ELSE):
            return e.src[1:]
        return e.src if op is Op.CAST and dt.is_int(e.src[0].dtype) else ()

    def visit(self, e: Expr) -> Bound:
        if not dt.is_int(e.dtype):
            return _UNBOUNDED
        form = to_linear(e, self.forms)
        return _atom(e, self.memo) if _is_atom(e, form) else linear_bounds(form, self.memo.__getitem__)


def bounds(e: Expr, memo: dict | None = None, forms: dict | None = None) -> Bound:
    """Inclusive ``(lo, hi)`` of integer expression ``e`` (``None``: unbounded that side): its linear form
    bounded exactly over the box of its atoms' ranges, each atom's from its own rule.  Iterative.
    ``memo``/``forms``: the caller's memos of bounds and linear forms."""
    memo = {} if memo is None else memo
    found = memo.get(e)
    if found is None:
        b = _Bounds(memo, forms)
        found = fold_along(e, b.operands, b.visit, memo)
    return found


def within(e: Expr, lo: int, hi: int) -> bool:
    """Whether ``lo <= e <= hi`` holds for every value of the variables."""
    b = bounds(e)
    return b[0] is not None and b[1] is not None and lo <= b[0] and b[1] <= hi


def wraps_where_stored(body: Expr) -> bool:
    """:func:`tensorad.ir.intrange.wraps_where_stored` with the bounds of this module (data
    included: a saturating cast of float data is within int32)."""
    def known(e: Expr):
        b = bounds(e)
        return None if None in b else b

    return _wraps_where_stored(body, known)
