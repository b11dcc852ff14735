"""Elimination plans shared between sums equal up to the identities of their variables.

A plan depends on the variables only through their positions, ranges, names and the order the rewrite
rules sort them in (:func:`tensorad.poly.linear.atom_key`).  :func:`shape_key` spells a plan's question
with each variable replaced by that data, and :func:`rename` turns the plan for one spelling into the plan
of another: the variables swapped, each variable the plan created made afresh in the same order.  Plans
with data-dependent equations keep the exact key.  The tables live in the optimizer call's context."""

from __future__ import annotations

from collections.abc import Sequence

from tensorad.ir.expr import Expr, Op, var
from tensorad.ir.rewrite import simultaneous
from tensorad.ir.spelling import Speller, Unkeyable


class _PositionSpeller(Speller):
    """Spells each variable as its position among the question's variables."""

    def __init__(self, variables: Sequence[Expr]) -> None:
        super().__init__()
        self.pos = {v: k for k, v in enumerate(variables)}

    def var_data(self, v: Expr) -> tuple:
        if v not in self.pos:
            raise Unkeyable("a variable not among the question's")
        return (self.pos[v],)

    def payload(self, e: Expr) -> object:
        if e.op is Op.REDUCE or e.op is Op.DATA_INDEX:
            raise Unkeyable(e.op.name)
        return super().payload(e)


def shape_key(variables: Sequence[Expr], affine: Sequence[Expr]) -> tuple | None:
    """A key equal for two questions that differ by a renaming of ``variables`` keeping positions, names,
    ranges and creation order; None where a node is not covered."""
    sp = _PositionSpeller(variables)
    if len(sp.pos) != len(variables):
        return None
    try:
        conds = tuple(sp.expr(c) for c in affine)
    except Unkeyable:
        return None
    order = tuple(sorted(range(len(variables)), key=lambda k: (variables[k].name, variables[k].arg.uid)))
    head = tuple((v.name, v.dtype, v.lo, v.hi) for v in variables)
    return head, order, conds, tuple(sp.lines)


def rename(plan, old: Sequence[Expr], new: Sequence[Expr]):
    """``plan`` (made for the variables ``old``) for the variables ``new``, position by
    position; the variables the plan made are made again, in order."""
    mapping = dict(zip(old, new))
    for v in plan.rvars:
        if v not in mapping:
            mapping[v] = var(v.name, v.lo, v.hi, v.dtype)
    swap = simultaneous(mapping)
    return type(plan)(
        mapping=tuple((mapping[k], swap(value)) for k, value in plan.mapping),
        rvars=tuple(mapping[v] for v in plan.rvars),
        cond=swap(plan.cond),
        guards=tuple(swap(g) for g in plan.guards),
        empty=plan.empty)
