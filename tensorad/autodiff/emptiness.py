"""Where a reduction runs over nothing: the tangent there is a strong zero.

A reduction whose ``where`` leaves no point for some outputs yields its identity there, which no input
moves: its derivative is 0, but the next chain-rule factor evaluated at the identity may be infinite
(``0 * inf``).  So the tangent of such a reduction is ``select(empty, 0, d)``, a gate that
:func:`.zero.mul` keeps strong, carried by forward mode across the tensor that stores it
(:mod:`.forward`).  The emptiness condition is exact on the affine part of the ``where``; a conjunct that
reads data is dropped (the gate only where the reduction is certainly empty).  Size variables stay in
the condition (isl parameters): it holds at the sizes where the reduction is empty."""

from __future__ import annotations

from ..ir.expr import Expr, Op
from ..ir.rewrite import chain, free_vars, walk
from ..poly.affine import IndexSpace, always
from ..poly.domain import IndexSet


def empty_where(node: Expr) -> Expr | None:
    """The condition on the free index variables of ``REDUCE`` ``node`` under which it reduces
    over no point, or ``None`` where it is never certainly empty (or that is not decided)."""
    rvars = list(node.arg.axes)
    cond = node.src[0]
    if cond.op is Op.CONST and cond.arg and all(always(v.hi > v.lo) for v in rvars):
        return None  # a full box: the common case, decided without isl
    kept = [c for c in chain(cond, Op.AND)
            if not any(n.op in (Op.READ, Op.REDUCE, Op.DATA_INDEX) for n in walk(c))]
    outer = list(dict.fromkeys(v for c in kept for v in free_vars(c) if v not in rvars))
    if any(v.lo is None or v.hi is None for v in outer + rvars):
        return None
    space = IndexSpace(outer + rvars)
    kept = [c for c in kept if space.is_affine(c)]
    domain = IndexSet.from_conditions(outer + rvars, kept, space).project_onto(outer)
    box = IndexSet.box(outer)
    empty = IndexSet(outer, box.set.subtract(domain.set))
    return None if empty.is_empty() else empty.gist(box).to_cond()
