"""Zero masks peeled off a value without computing a guarded read outside its guard.

A scatter tests its source's masks, ``if_then_else(c, select(d, e, 0), 0)``, as one condition ``c && d``
(:mod:`.strategies.scatter`).  But ``&&`` computes both operands, while the ``if_then_else`` computed
``d`` only where ``c`` holds, where it may alone be valid (a checked gather index, a read proved in bounds
only under ``c``).  So a conjunct below a lazy guard that may fault (:func:`may_fault`) stays lazy,
``if_then_else(G, d, false)`` with ``G`` the lazy guards above it; one that cannot fault stays a plain
conjunct, which the scatter can solve or hoist."""

from __future__ import annotations

from tensorad.simplify.algebra.logic import conjuncts
from tensorad.simplify.algebra.rules import is_zero

from tensorad.ir.expr import FALSE, TRUE, Expr, Op, choice, logical, logical_not
from tensorad.ir.intrange import may_fault


def all_of(cs: list[Expr]) -> Expr:
    """``c1 && c2 && ...`` nested to the left, every conjunct kept as given (repeats and a ``True`` after
    the first other conjunct too; the optimizer's ``all_of`` drops repeats); ``True`` for none."""
    out = TRUE
    for c in cs:
        out = c if out is TRUE else logical(Op.AND, out, c)
    return out


def peel_masks(e: Expr, negated: bool = False) -> tuple[list[Expr], Expr]:
    """``(conjuncts, value)``: ``e`` is ``value`` where every conjunct holds and 0 elsewhere, peeling
    ``select(c, x, 0)`` / ``if_then_else(c, x, 0)`` (``select(c, 0, x)`` as ``!c`` when ``negated``);
    conjuncts may be computed wherever ``e`` is."""
    guards: list[Expr] = []
    lazy: list[Expr] = []  # the conjuncts of the if_then_else guards passed, as peeled
    memo: dict = {}
    while e.op in (Op.SELECT, Op.IF_THEN_ELSE) and e.src[1].dtype != "bool":
        c, a, b = e.src
        if is_zero(b):
            cond, inner = c, a
        elif negated and is_zero(a):
            cond, inner = logical_not(c), b
        else:
            break
        here = []
        for t in conjuncts(cond):
            if lazy and may_fault(t, memo):
                t = choice(Op.IF_THEN_ELSE, all_of(lazy), t, FALSE)
            here.append(t)
        guards += here
        if e.op is Op.IF_THEN_ELSE:
            lazy += here
        e = inner
    return guards, e
