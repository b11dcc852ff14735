"""Optimize one compute body: lift nonzeroness, split sums, eliminate reduction variables.

* a **sum** ``sum over k where C of f``: terms of ``f`` nonzero in different places are split
  (:mod:`.sums.split`); otherwise the affine conjuncts of ``nz(f)`` join ``C`` and
  :mod:`.sums.eliminate`'s plan substitutes determined variables, tightens the rest and gists ``C``, again
  where the substitution made a conjunct solvable (:func:`_turned_solvable`).  Non-affine conditions stay in
  the source as ``if_then_else(guard, f, 0)``; with no variable left the reduction is
  ``if_then_else(C, f, 0)``.
* a **non-reduction** body ``e``: the affine conjuncts of ``nz(e)``, gisted against the axes' box, become
  ``if_then_else(cond, e', 0)``.
* other reductions are simplified, and an empty domain becomes the identity.

Guards are ``if_then_else``, not ``select``: after substitution ``f`` may read in bounds only under them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tensorad.ir.expr import FALSE, TRUE, Expr, Op, ReduceArg, const, signed_sum, var
from tensorad.ir.rewrite import simultaneous, substitute, walk
from tensorad.ir.tensor import Tensor
from tensorad.poly.domain import IndexSet

from ..algebra.logic import all_of, conjuncts, implied_conjuncts
from ..algebra.rules import is_zero, simplify_expr
from ..zeros.nonzero import assume, nonzero
from .eliminate import (
    Plan,
    apply_plan,
    digit_equation,
    domain_conjuncts,
    equation_for,
    guard_of,
    make_plan,
    space_of,
    split_affine,
)
from .plan_key import shape_key
from .split import group_terms

MakeTensor = Callable[[str, Sequence[Expr], Expr], Tensor]


def _ite(cond: Expr, e: Expr, ctx=None) -> Expr:
    if cond is TRUE:
        return e
    if cond is FALSE:
        return const(0, e.dtype)
    return simplify_expr(Expr(Op.IF_THEN_ELSE, e.dtype, (cond, e, const(0, e.dtype))), ctx)


def lift_body(axes: Sequence[Expr], body: Expr, ctx=None) -> Expr:
    """A non-reduction body with its affine nonzeroness lifted to an outer guard."""
    body = simplify_expr(body, ctx)
    if body.op is Op.CONST:
        return body
    affine, _ = split_affine(implied_conjuncts(nonzero(body, ctx)), axes, ctx)
    if not affine:
        return body
    cond = _box_guard(axes, affine, ctx)
    return const(0, body.dtype) if cond is None else _ite(cond, assume(body, affine, ctx), ctx)


def _box_guard(axes: Sequence[Expr], affine: Sequence[Expr], ctx) -> Expr | None:
    """Where the conjuncts ``affine`` hold, gisted against the box of ``axes`` (None: nowhere); memoized
    in the call's context up to a renaming of the axes (:func:`.sums.plan_key.shape_key`)."""
    shape = shape_key(axes, affine) if ctx is not None and ctx.share_plans else None
    if shape is not None:
        found = ctx.guards.get(shape)
        if found is not None:
            cond, old = found
            return None if cond is None else simultaneous(dict(zip(old, axes)))(cond)
    dom = IndexSet.from_conditions(axes, affine, space_of(axes, ctx))
    cond = None if dom.is_empty() else simplify_expr(dom.gist(IndexSet.box(axes)).to_cond(), ctx)
    if shape is not None:
        ctx.counts["box guard"] += 1
        ctx.guards[shape] = (cond, tuple(axes))
    return cond


def optimize_sum(axes: Sequence[Expr], red: Expr, name: str, make: MakeTensor,
                 split: bool = True, ctx=None) -> Expr:
    """A sum-reduction body rewritten as the module docstring says; ``make(name, axes, body)``: a new term."""
    cond, src = simplify_expr(red.src[0], ctx), simplify_expr(red.src[1], ctx)
    rvars = list(red.arg.axes)
    if cond is FALSE or is_zero(src):
        return const(0, red.dtype)
    groups = group_terms(src, ctx) if split else None
    if groups is not None:
        groups = by_domain(groups, list(axes) + rvars, ctx)
    if groups is not None and len(groups) == 1:  # one domain: one sum, its terms' conditions lifted
        cond = all_of(conjuncts(cond) + list(groups[0][0]))
        groups = None
    if groups is not None:
        parts = []
        for k, (_, term) in enumerate(groups):
            m = {v: var(v.name, v.lo, v.hi) for v in list(axes) + rvars}
            sub_axes = [m[a] for a in axes]
            sub = _reduce_like(red, [m[r] for r in rvars], substitute(cond, m), substitute(term, m))
            t = make(f"{name}.t{k}", sub_axes, sub)
            parts.append(t[tuple(axes)])
        return simplify_expr(sum(parts[1:], parts[0]), ctx)
    return solve_sum(axes, rvars, cond, src, red, ctx)


def by_domain(groups: Sequence[tuple[Expr, Expr]], variables: Sequence[Expr],
              ctx=None) -> list[tuple[tuple[Expr, ...], Expr]]:
    """``group_terms``'s groups joined by the part of their nonzeroness a sum's domain can use
    (:func:`.eliminate.domain_conjuncts`), each with that part: terms that differ only in other
    data-dependent conditions run over one domain, so one sum of them does the work of each of theirs
    (:mod:`.sums.masked` lifts their masks term by term where that is cheaper)."""
    joined: dict[frozenset, tuple[tuple[Expr, ...], list[Expr]]] = {}
    for nz, term in groups:
        affine, equations = domain_conjuncts(nz, variables, ctx)
        usable = tuple(affine + equations)
        joined.setdefault(frozenset(usable), (usable, []))[1].append(term)
    return [(usable, simplify_expr(signed_sum([(1, t) for t in terms]), ctx))
            for usable, terms in joined.values()]


def _reduce_like(red: Expr, rvars: Sequence[Expr], cond: Expr, src: Expr) -> Expr:
    ra = red.arg
    return Expr(Op.REDUCE, src.dtype, (cond, src), ReduceArg(ra.combiner, tuple(rvars), 0))


def solve_sum(axes: Sequence[Expr], rvars: Sequence[Expr], cond: Expr, src: Expr, red: Expr,
              ctx=None) -> Expr:
    """One sum (no split): lift, plan, apply, again while eliminating made a residual conjunct affine."""
    variables = list(axes) + list(rvars)
    where_aff, where_res = split_affine(conjuncts(cond), variables, ctx)
    nz_aff, nz_res = split_affine(conjuncts(nonzero(src, ctx)), variables, ctx)
    # data-dependent equations in the source (k == Winner[i]) are lifted so they can be solved
    eqs = [c for c in nz_res if equation_for(c, rvars, ctx) is not None or digit_equation(c, rvars)]
    src = assume(src, nz_aff + eqs, ctx)
    residual = where_res + eqs
    equations = [c for c in residual if c.op is Op.EQ]
    indices = list(dict.fromkeys(i for e in [src] + residual for n in walk(e) if n.op is Op.READ
                                 for i in n.src)) if equations else []
    plan = make_plan(axes, rvars, list(dict.fromkeys(where_aff + nz_aff)), equations, indices, ctx)
    if plan.empty:
        return const(0, red.dtype)
    (src,) = apply_plan(plan, [src], ctx)
    outer, inner = guard_of(plan, residual, ctx)
    src = _ite(outer, _ite(inner, src, ctx), ctx)
    if is_zero(src):
        return const(0, red.dtype)
    if not plan.rvars:
        return _ite(plan.cond, src, ctx)
    if _turned_solvable(plan, axes, rvars, where_res + nz_res, ctx):
        return solve_sum(axes, plan.rvars, plan.cond, src, red, ctx)
    return simplify_expr(_reduce_like(red, plan.rvars, plan.cond, src), ctx)


def _turned_solvable(plan: Plan, axes: Sequence[Expr], rvars: Sequence[Expr], residual: Sequence[Expr],
                     ctx) -> bool:
    """Whether the plan's substitution made a conjunct of the non-affine ``residual`` one the plan could
    solve: affine over the axes and the plan's fewer reduction variables (``k == j + g*i`` once ``g :=
    0``), or a data-dependent equation over them that none was over ``rvars`` (``I[a // 2] == a % 2`` once
    ``a := 2 i + r``: :func:`.eliminate.digit_equation`).  Solving the sum again lifts it:

        sum_r [A(o, r) && B(o, r)] g(o, r) = sum_{r : A(o, r)} [B(o, r)] g(o, r)

    for ``A`` affine and ``B`` anything."""
    if not residual:
        return False
    made = [c for e in apply_plan(plan, list(residual), ctx) for c in conjuncts(e)]
    if len(plan.rvars) < len(rvars) and split_affine(made, list(axes) + list(plan.rvars), ctx)[0]:
        return True
    return not any(digit_equation(c, rvars) for c in residual) and any(digit_equation(c, plan.rvars)
                                                                       for c in made)


def simplify_reduction(axes: Sequence[Expr], red: Expr, ctx=None) -> Expr:
    """A non-sum reduction: simplified expressions; an empty domain gives the identity."""
    red = simplify_expr(red, ctx)
    if red.op is not Op.REDUCE:
        return red
    variables = list(axes) + list(red.arg.axes)
    affine, _ = split_affine(conjuncts(red.src[0]), variables, ctx)
    if affine and IndexSet.from_conditions(variables, affine, space_of(variables, ctx)).is_empty():
        return red.arg.combiner.identity[red.arg.value_index]
    return red
