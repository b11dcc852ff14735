"""Conditions as lists: conjuncts and disjuncts of ``&&``/``||`` chains, and back.

Comparisons of expressions with ``==`` build nodes, so membership is by identity (:func:`has`)."""

from __future__ import annotations

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, TRUE, Expr, Op
from tensorad.ir.rewrite import chain


def has(items, x: Expr) -> bool:
    """``x in items`` by identity (``==`` on expressions builds a comparison node)."""
    return any(y is x for y in items)


def _chain(c: Expr, op: Op, unit: Expr) -> list[Expr]:
    return [e for e in chain(c, op) if e is not unit]


def conjuncts(c: Expr) -> list[Expr]:
    """The conjuncts of an ``&&`` chain, left to right (``True`` has none)."""
    return _chain(c, Op.AND, TRUE)


def disjuncts(c: Expr) -> list[Expr]:
    """The disjuncts of an ``||`` chain, left to right (``False`` has none)."""
    return _chain(c, Op.OR, FALSE)


def implied_conjuncts(c: Expr) -> list[Expr]:
    """The conjuncts of ``c``, and those every disjunct of a disjunction among them has, at any depth
    of the ``&&``/``||`` tree: ``x && ((a && b) || (a && c))`` gives ``[x, (a && b) || (a && c), a]``.
    Each one holds wherever ``c`` does."""
    out = conjuncts(c)
    for d in out:
        if d.op is Op.OR:
            first, *rest = [implied_conjuncts(x) for x in disjuncts(d)]
            out = out + [x for x in first if all(has(r, x) for r in rest) and not has(out, x)]
    return out


def _joined(cs, op: Op, unit: Expr) -> Expr:
    out = unit
    for c in dict.fromkeys(cs):
        out = c if out is unit else Expr(op, dt.BOOL, (out, c))
    return out


def all_of(cs) -> Expr:
    """``c1 && c2 && ...`` without repeats (``True`` for none)."""
    return _joined(cs, Op.AND, TRUE)


def any_of(cs) -> Expr:
    """``c1 || c2 || ...`` without repeats (``False`` for none)."""
    return _joined(cs, Op.OR, FALSE)
