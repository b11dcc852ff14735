"""A masked sum's conjuncts and factors that read no reduction variable, moved out of the sum.

With ``E``, ``m`` and ``d`` free of the reduction variables ``r`` and ``C`` the conjuncts that read
``r``::

    sum_{r in W} select(C(r) && E, a(r), 0) = select(E, [sum_{r in W} select(C(r), a(r), 0)], 0)
    sum_{r in W} select(C(r), m * a(r), 0)  = select(N > 0, m * [sum_{r in W} select(C(r), a(r), 0)], 0)
    sum_{r in W} select(C(r), a(r) / d, 0)  = select(N > 0, [sum_{r in W} select(C(r), a(r), 0)] / d, 0)

with ``N = sum_{r in W} select(C(r), 1, 0)``.  The first is exact; the others reassociate, and the count
keeps the strong zero where the mask keeps no term (a finite constant coefficient needs none).  A lazy
``if_then_else`` mask stays lazy outside.

It applies only where every new sum has lost a non-unit output axis or is a scan along an axis the old one
was not (:func:`tensorad.poly.nesting.scan_axes`); :func:`.factor.fold_unshared` does not fold them back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tensorad.ir import dtype as dt
from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg, const, signed_sum
from tensorad.ir.reducer import sum as sum_reducer
from tensorad.ir.rewrite import free_vars, walk
from tensorad.poly.affine import decide
from tensorad.poly.nesting import scan_axes

from ..algebra.logic import all_of, conjuncts
from ..algebra.rules import absorbs, is_zero, simplify_expr
from .factor import Make, TooManyTerms, like_terms, mentions, nonempty_where, product, scaled, terms
from .split import expand

Bracket = tuple[tuple[Expr, ...], Expr]  # (the axes it is a tensor over, its sum)


def _single_term(e: Expr, bound: frozenset) -> tuple[Expr, tuple[Expr, ...]] | None:
    """``e`` as one ``coef * prod(factors)`` with ``coef`` free of ``bound`` (:func:`.factor.terms`)."""
    try:
        groups = list(like_terms(terms(e, bound)).values())
    except TooManyTerms:
        return None
    return groups[0] if len(groups) == 1 else None


def _mask(e: Expr) -> bool:
    """``select(c, a, 0)`` or ``if_then_else(c, a, 0)`` over floats."""
    return e.op in (Op.SELECT, Op.IF_THEN_ELSE) and is_zero(e.src[2]) and dt.is_float(e.dtype)


def _split_conjuncts(mask: Expr, factors: Sequence[Expr], bound: frozenset) -> tuple[list, list]:
    """The conjuncts of ``mask``'s condition that stay in the sum, and those that move out: those reading
    no variable of ``bound``, except, in a lazy ``if_then_else``, one reading a variable the factors read."""
    read = {v for f in factors for v in free_vars(f)} if mask.op is Op.IF_THEN_ELSE else set()
    inside, outside = [], []
    for c in conjuncts(mask.src[0]):
        stays = mentions(c, bound) or any(v in read for v in free_vars(c))
        (inside if stays else outside).append(c)
    return inside, outside


def _over(axes: Sequence[Expr], body: Expr) -> tuple[Expr, ...]:
    """The axes ``body`` reads (all of them when it drops only unit axes, as :mod:`.factor` does)."""
    free = set(free_vars(body))
    kept = tuple(a for a in axes if a in free)
    dropped = [a for a in axes if a not in free]
    return kept if any(decide(a.hi - a.lo > 1) for a in dropped) else tuple(axes)


def _cheaper(axes: Sequence[Expr], red: Expr, parts: _Parts, brackets: Sequence[Bracket]) -> bool:
    """Every bracket has lost a non-unit axis of ``axes`` or is a scan along an axis ``red`` is not (a lost
    axis a kept conjunct equates with data, ``ax0 == I[r]``, not counting: that sum is a scatter)."""
    before = set(scan_axes(axes, red.arg.axes, red.src[0], red.src[1:]))
    scatter = any(_gathered_axis(c, axes) for c in parts.inside)
    for ax, body in brackets:
        scanned = set(scan_axes(ax, body.arg.axes, body.src[0], body.src[1:]))
        if (scatter or len(ax) == len(axes)) and not scanned - before:
            return False
    return True


def _gathered_axis(c: Expr, axes: Sequence[Expr]) -> bool:
    """Whether ``c`` is an equation of an output axis and an index read from data."""
    if c.op is not Op.EQ:
        return False
    out = set(axes)
    return any(v in out for v in free_vars(c)) and \
        any(n.op in (Op.DATA_INDEX, Op.READ) for n in walk(c))


@dataclass(frozen=True)
class _Parts:
    """A sum's summand ``coef * op(inside && outside, m * prod(factors), 0)``."""

    coef: Expr  # free of the reduction variables, outside the mask
    op: Op  # SELECT, or the lazy IF_THEN_ELSE
    inside: list  # conjuncts kept in the sum
    outside: list  # conjuncts moved out
    m: Expr  # the then-branch's coefficient, free of the reduction variables
    factors: tuple[Expr, ...]  # the then-branch's other factors


def _parts(red: Expr, ctx=None) -> _Parts | None:
    """``red``'s summand split as :class:`_Parts`, or ``None`` (not one masked term, or nothing moves out)."""
    bound = frozenset(red.arg.axes)
    outer = _single_term(red.src[1], bound)
    if outer is None or len(outer[1]) != 1 or not _mask(outer[1][0]):
        return None
    coef, (mask,) = outer
    inner = _single_term(mask.src[1], bound)
    if inner is None:
        return None
    m, factors = simplify_expr(inner[0], ctx), inner[1]
    inside, outside = _split_conjuncts(mask, factors, bound)
    if not outside and m.op is Op.CONST and m.arg == 1:
        return None
    return _Parts(coef, mask.op, inside, outside, m, factors)


def _brackets(axes: Sequence[Expr], red: Expr, parts: _Parts) -> list[Bracket]:
    """The sums left: ``sum_W op(inside, prod(factors), 0)``, then the count of the kept terms
    where ``m`` may be inf or NaN (the module docstring)."""

    def summed(keep: Expr, value: Expr) -> Bracket:
        arg = ReduceArg(sum_reducer.instantiate((value.dtype,)), red.arg.axes, 0)
        body = Expr(Op.REDUCE, value.dtype, (red.src[0], _masked(parts.op, keep, value)), arg)
        return _over(axes, body), body

    keep = all_of(parts.inside)
    out = [summed(keep, product(parts.factors, red.dtype))]
    if parts.factors and _counted(parts):  # (without factors the first sum is the count)
        out.append(summed(keep, const(1, "int32")))
    return out


def _counted(parts: _Parts) -> bool:
    """Whether the kept terms must be counted: ``m`` may be inf or NaN and the mask may keep none."""
    return bool(parts.inside) and not absorbs(parts.m)


def lift_masked(axes: Sequence[Expr], red: Expr, make: Make, ctx=None) -> Expr | None:
    """``red`` (a float sum over ``axes`` of ``coef * mask``, or of several such terms, each lifted from
    a sum of its own) with the masks' invariant conjuncts and coefficients moved out, or ``None`` when
    nothing moves or it is no cheaper."""
    if red.op is not Op.REDUCE or red.arg.combiner.kind != "sum" or len(red.src) != 2 \
            or not dt.is_float(red.dtype):
        return None
    one = _lift_one(axes, red, make, ctx)
    terms = expand(red.src[1]) if one is None else []
    if len(terms) < 2:
        return one
    sums = [Expr(Op.REDUCE, red.dtype, (red.src[0], simplify_expr(t, ctx)), red.arg) for _, t in terms]
    lifted = [_lift_one(axes, t, make, ctx) for t in sums]
    if any(t is None for t in lifted):
        return None
    return simplify_expr(signed_sum([(s, t) for (s, _), t in zip(terms, lifted)]), ctx)


def _lift_one(axes: Sequence[Expr], red: Expr, make: Make, ctx=None) -> Expr | None:
    """:func:`lift_masked` of a sum of one masked term."""
    parts = _parts(red, ctx)
    if parts is None:
        return None
    nonempty = nonempty_where(axes, red, ctx)
    if nonempty is None:
        return None
    brackets = _brackets(axes, red, parts)
    if not _cheaper(axes, red, parts, brackets):
        return None
    reads = [make(ax, body, False, False) for ax, body in brackets]
    out = scaled(parts.m, reads[0])
    if _counted(parts):
        count = reads[-1]
        out = _masked(parts.op, count > const(0, count.dtype), out)
    out = scaled(parts.coef, _masked(parts.op, all_of(parts.outside), out))
    if nonempty is not TRUE:
        out = Expr(Op.IF_THEN_ELSE, red.dtype, (nonempty, out, const(0, red.dtype)))
    return simplify_expr(out, ctx)


def _masked(op: Op, keep: Expr, value: Expr) -> Expr:
    """``op(keep, value, 0)`` (``value`` itself where ``keep`` is true everywhere)."""
    return value if keep is TRUE else Expr(op, value.dtype, (keep, value, const(0, value.dtype)))
