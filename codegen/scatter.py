"""Scatter-add: a sum whose output axis is fixed by a gather index, lowered to N*J adds.

The adjoint of a gather ``Y[i, j] = E[I[i], j]`` comes out of autodiff (head-product form,
:mod:`tensorad.autodiff.adjoint`) as

    dE[v, j] = sum_i  if_then_else(data_index(I[i]) == v, H[i, j], 0)

-- correct, but a loop over the whole vocabulary ``v`` for each ``(i, j)``: ``V*N*J`` work.
The condition fixes ``v`` for each ``(i, j)``, so the same sum is the scatter-add

    dE[...] = 0;  for i, j:  dE[data_index(I[i]), j] += H[i, j]

with one add per read element (``N*J``).  :func:`match_scatter` finds every output axis ``v``
with a conjunct ``v == d`` (in the reduction's ``where`` or the zero-guard of its source) where
``d`` is a gather index expression free of ``v``; :func:`lower_scatter` zero-fills the output
and emits the update ``out[x/v := d] = out[x/v := d] + src`` over the remaining output axes and
the reduce axes, the rest of the condition as its guard.  The nest is serial (a data-dependent
address cannot be split among threads without races), so the result is deterministic:
the adds happen in the order of the reduce axes, as ``ta.evaluate``'s sum does.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorad.simplify.logic import conjuncts

from tensorad.ir.expr import TRUE, Expr, Op, const, logical
from tensorad.ir.intrange import index_bounds
from tensorad.ir.rewrite import free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.affine import IndexSpace

from .domain import PolyStmt, split_condition
from .islast import build_loops
from .program import Buffer, Fill, If, Nest, Store
from .work import count_work


@dataclass(frozen=True, eq=False)
class ScatterSpec:
    """``out[target] += value`` over ``loop_vars`` where ``cond`` holds."""

    target: tuple[Expr, ...]  # one index per output axis (a gather expression or the axis)
    loop_vars: tuple[Expr, ...]  # reduce axes, then the output axes not fixed by a gather
    value: Expr
    cond: Expr


def _is_zero(e: Expr) -> bool:
    return e.op is Op.CONST and e.dtype != "bool" and e.arg == 0


def _peel(source: Expr) -> tuple[list[Expr], Expr]:
    """The guards of ``select(c, e, 0)``/``if_then_else(c, e, 0)`` nests and the value inside."""
    guards = []
    while source.op in (Op.SELECT, Op.IF_THEN_ELSE) and _is_zero(source.src[2]):
        guards += conjuncts(source.src[0])
        source = source.src[1]
    return guards, source


def _gathers(e: Expr) -> bool:
    return any(n.op is Op.DATA_INDEX for n in walk(e))


def match_scatter(op: ComputeOp, bodies: tuple[Expr, ...]) -> ScatterSpec | None:
    """The scatter-add form of a one-output sum, when a gather index fixes an output axis."""
    if len(bodies) != 1 or bodies[0].op is not Op.REDUCE:
        return None
    red = bodies[0]
    if red.arg.combiner.kind != "sum" or len(red.src) != 2:
        return None
    guards, value = _peel(red.src[1])
    terms = conjuncts(red.src[0]) + guards
    solved: dict[Expr, Expr] = {}
    for t in terms:
        if t.op is not Op.EQ:
            continue
        for a, d in (t.src, t.src[::-1]):
            if a in op.axes and a not in solved and _gathers(d) and a not in free_vars(d) \
                    and not any(s in free_vars(d) for s in solved):
                solved[a] = d
                break
    if not solved:
        return None
    # later solutions may mention earlier axes: substitute until no solved axis is left
    for a in list(solved):
        solved = {b: substitute(d, {a: solved[a]}) if b is not a else d for b, d in solved.items()}
    rest = []
    for t in terms:
        u = substitute(t, solved)
        if u.op is Op.EQ and u.src[0] is u.src[1]:
            continue
        rest.append(u)
    for a, d in solved.items():  # the gather's range may exceed the axis: keep it in [0, extent)
        lo, hi = index_bounds(d) or (None, None)
        if lo is None or lo < 0:
            rest.append(d >= 0)
        if hi is None or hi >= a.hi:
            rest.append(d < a.hi)
    cond = TRUE
    for t in rest:
        cond = t if cond is TRUE else logical(Op.AND, cond, t)
    value = substitute(value, solved)
    loop_vars = tuple(red.arg.axes) + tuple(a for a in op.axes if a not in solved)
    if any(a in free_vars(value) or a in free_vars(cond) for a in solved):
        return None
    target = tuple(solved.get(a, a) for a in op.axes)
    return ScatterSpec(target, loop_vars, value, cond)


def lower_scatter(op: ComputeOp, spec: ScatterSpec, out: Buffer) -> list:
    """Zero-fill ``out``, then one serial nest of ``out[target] += value``."""
    space = IndexSpace(spec.loop_vars)
    aff, rest = split_condition(space, spec.cond)
    here = Expr(Op.READ, out.dtype, spec.target, out.tensor)
    update: tuple = (Store(out, spec.target, here + spec.value),)
    if rest is not TRUE:
        update = (If(rest, update, (), affine=False),)
    stmt = PolyStmt("S", spec.loop_vars, space.box().intersect(aff), update, spec.loop_vars)
    body = build_loops([stmt])
    axes = ", ".join(a.name for a in spec.loop_vars)
    nest = Nest(op.name, body, (out,), count_work(body), f"scatter-add over {axes}")
    return [Fill(out, const(0, out.dtype)), nest]
