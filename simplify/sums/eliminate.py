"""Reduction-variable elimination: solve a sum's where-condition for its reduction variables.

``sum over (k...) where C of f`` is rewritten with the integer set ``D`` (outer axes x reduction
variables) where the affine conjuncts of ``C`` hold:

1. **Eliminate**: a reduction variable ``k`` that ``D`` determines is replaced by that function and
   dropped; ``D`` becomes its projection.  Candidates rank by number of pieces, then of divs.
2. **Data-dependent equations**: a residual conjunct ``k == e`` (``e`` free of ``k``: ``k == Winner[i]``)
   substitutes ``k := e``, and ``D``'s constraints on ``k`` become a guard on ``e``; where ``k`` indexes a
   read, only when ``e`` reads data through gather indices alone.  Another equation of data and integer
   variables -- over several, with a coefficient other than 1 (``2 a + b == I[i]``), or whose ``e`` a read
   cannot take -- is solved by isl with the data as one more variable (``a = I[i] // 2``, ``b = I[i] % 2``
   where ``0 <= I[i] < 4``; a read's index clipped, exact under that guard: :func:`_solved_digits`).
3. **Tighten** the rest: a variable gets its exact constant range on ``D``, or is *deskewed*,
   ``k = lo(outer) + k'`` with ``k'`` in ``[0, extent)``, when a piece of isl's lexmin gives a shorter range.
4. The where-condition is ``D`` gisted against the box of the remaining variables.

The isl half (a :class:`Plan`) depends only on the variables and the affine conjuncts and is memoized in
the optimizer's context; applying it is a substitution."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

from tensorad.ir import dtype as dt
from tensorad.ir.expr import TRUE, Expr, Op, data_index, var
from tensorad.ir.intrange import may_fault
from tensorad.ir.rewrite import free_vars, substitute, walk
from tensorad.ir.tensor import reads_data
from tensorad.poly.affine import IndexSpace, decide
from tensorad.poly.domain import IndexSet
from tensorad.poly.linear import Linear, from_linear, solve_for, to_linear

from ..algebra.logic import all_of, conjuncts
from ..algebra.rules import simplify_expr
from .plan_key import rename, shape_key


@dataclass(frozen=True)
class Plan:
    """How to rewrite a sum: ``mapping`` (old reduction var -> expression of outer and new
    reduction vars), the new reduction vars, the new affine where-condition and extra guards
    (non-affine, from data-dependent equations).  ``empty``: the sum is zero everywhere."""

    mapping: tuple[tuple[Expr, Expr], ...]
    rvars: tuple[Expr, ...]
    cond: Expr
    guards: tuple[Expr, ...]
    empty: bool = False


MAX_PIECES = 3  # a piecewise solution becomes a select chain; more pieces are not worth it


def space_of(variables: Sequence[Expr], ctx=None) -> IndexSpace:
    """An isl space over ``variables``: the call's own (its conversions kept) given a context, else new."""
    return IndexSpace(variables) if ctx is None else ctx.space(variables)


def split_affine(conds: Sequence[Expr], variables: Sequence[Expr], ctx=None) -> tuple[list[Expr], list[Expr]]:
    """Conjuncts isl represents exactly over ``variables``, and the rest (residual).  Each answer is kept
    in the call's context up to a renaming of ``variables`` (:func:`.sums.plan_key.shape_key`)."""
    made: list[IndexSpace] = []  # (the space, made when first needed)
    affine, residual = [], []
    for c in conds:
        if variables and _affine_over(c, variables, ctx, made):
            affine.append(c)
        else:
            residual.append(c)
    return affine, residual


def domain_conjuncts(c: Expr, variables: Sequence[Expr], ctx=None) -> tuple[list[Expr], list[Expr]]:
    """The conjuncts of ``c`` a sum's domain can use: the affine ones over ``variables``, and the
    data-dependent integer equations with a term in one of them, which solve a reduction variable
    or scatter to an axis (``k == Winner[i]``)."""
    affine, residual = split_affine(conjuncts(c), variables, ctx)
    return affine, [e for e in residual if e.op is Op.EQ and dt.is_int(e.src[0].dtype)
                    and _has_term(to_linear(e.src[0]) - to_linear(e.src[1]), variables)]


def _has_term(f: Linear, variables: Sequence[Expr]) -> bool:
    """Whether the linear form ``f`` has a term in one of ``variables`` (not only inside an atom)."""
    return any(atom is v for atom, _ in f.terms for v in variables)


def _affine_over(c: Expr, variables: Sequence[Expr], ctx, made: list) -> bool:
    shape = shape_key(variables, (c,)) if ctx is not None and ctx.share_plans else None
    if shape is not None:
        found = ctx.affine.get(shape)
        if found is not None:
            return found
    if not made:
        made.append(space_of(variables, ctx))
    answer = not any(n.op in (Op.READ, Op.REDUCE) for n in walk(c)) and made[0].is_affine(c)
    if shape is not None:
        ctx.counts["affine test"] += 1
        ctx.affine[shape] = answer
    return answer


def _compose(mapping: dict[Expr, Expr], v: Expr, value: Expr) -> None:
    for k in list(mapping):
        mapping[k] = substitute(mapping[k], {v: value})
    mapping[v] = value


def equation_for(eq: Expr, rvars: Sequence[Expr], ctx=None) -> tuple[Expr, Expr] | None:
    """``(k, e)`` when residual ``eq`` is ``k == e`` up to sign, ``e`` free of ``k``."""
    if eq.op is not Op.EQ or not dt.is_int(eq.src[0].dtype):
        return None
    f = to_linear(eq.src[0]) - to_linear(eq.src[1])
    for r in rvars:
        g = solve_for(f, r)  # coef*r + rest + c == 0  ->  r == -coef*(rest + c)
        if g is None:
            continue
        e = None
        for a, k in g.terms:
            term = a * k if k != 1 else a
            e = term if e is None else e + term
        e = (e + g.const if g.const else e) if e is not None else Expr(Op.CONST, dt.INDEX, (), g.const)
        return r, simplify_expr(e, ctx)
    return None


def make_plan(outer: Sequence[Expr], rvars: Sequence[Expr], affine: Sequence[Expr],
              equations: Sequence[Expr] = (), indices: Sequence[Expr] = (), ctx=None) -> Plan:
    """The (memoized) elimination plan for a sum over ``rvars`` where ``affine`` holds.  ``indices``: the
    index expressions of the sum's reads; a data-dependent equation is not used for a variable in one."""
    variables, sharing = list(outer) + list(rvars), ctx is not None and ctx.share_plans and not equations
    shape = shape_key(variables, affine) if sharing else None
    if shape is not None:  # equal up to the variables' identities: renamed (:mod:`.sums.plan_key`)
        shape = (len(outer), shape)
        found = ctx.plans.get(shape)
        if found is not None:
            ctx.counts["plan renamed"] += 1
            plan, old = found
            return rename(plan, old, variables)
        ctx.counts["plan"] += 1
        plan = _make_plan(list(outer), list(rvars), list(affine), [], [], ctx)
        ctx.plans[shape] = (plan, variables)
        return plan
    key = (tuple(outer), tuple(rvars), tuple(affine), tuple(equations), tuple(indices))
    plans = ctx.plans if ctx is not None else {}
    found = plans.get(key)
    if found is None:
        if ctx is not None:
            ctx.counts["plan"] += 1
        found = plans[key] = _make_plan(list(outer), list(rvars), list(affine), list(equations),
                                        list(indices), ctx)
    return found


def _gathers_data(e: Expr) -> bool:
    """Whether ``e`` holds a gather index read from data (``data_index(S[k])``), not of a plain variable."""
    return any(n.op is Op.DATA_INDEX and any(m.op is Op.READ for m in walk(n.src[0])) for n in walk(e))


def _unconstrained(outer: list[Expr], rvars: list[Expr]) -> bool:
    """Whether a sum without conditions over ``rvars`` keeps them as they are (every range has 2+ points)."""
    return all(v.lo is not None and v.hi is not None and decide(v.lo < v.hi) for v in outer) \
        and all(r.lo is not None and r.hi is not None and decide(r.hi - r.lo > 1) for r in rvars)


def _make_plan(outer: list[Expr], rvars: list[Expr], affine: list[Expr],
               equations: list[Expr], indices: list[Expr], ctx) -> Plan:
    if not affine and not equations and _unconstrained(outer, rvars):
        return Plan((), tuple(rvars), TRUE, ())
    dom = IndexSet.from_conditions(outer + rvars, affine, space_of(outer + rvars, ctx))
    if dom.is_empty():
        return Plan((), (), TRUE, (), empty=True)
    mapping: dict[Expr, Expr] = {}
    rvars = list(rvars)
    # A variable no condition mentions is undetermined, its range its own: what isl would answer.
    mentioned = {n for c in affine for n in walk(c) if n.op is Op.VAR}
    free = {r for r in rvars if r not in mentioned and r.lo is not None and r.hi is not None
            and decide(r.hi - r.lo > 1)}
    # 1. eliminate determined variables, best first; an undetermined one stays so on projections.
    undetermined = set(free)
    while rvars:
        best = None
        for idx, r in enumerate(rvars):
            if r in undetermined:
                continue
            if ctx is not None:
                ctx.counts["solve"] += 1
            sol = dom.solve(r)
            if sol is None:
                undetermined.add(r)
                continue
            if sol.pieces > MAX_PIECES:
                continue
            score = (sol.pieces, sol.divs, idx)
            if best is None or score < best[0]:
                best = (score, r, sol)
        if best is None:
            break
        _, r, sol = best
        _compose(mapping, r, simplify_expr(sol.value, ctx))
        dom, rvars = dom.project_out(r), [x for x in rvars if x is not r]
    # 2. data-dependent equations k == e(...)
    guards: list[Expr] = []
    for eq in equations:
        eq = simplify_expr(substitute(eq, mapping), ctx)
        in_reads = {v for ix in indices for v in walk(substitute(ix, mapping)) if v.op is Op.VAR}
        found = equation_for(eq, [r for r in rvars if r not in in_reads], ctx)
        if found is None:  # a read index may take a gather index: H[b] -> H[data_index(S[k])]
            found = equation_for(eq, [r for r in rvars if r in in_reads], ctx)
            if found is not None and (reads_data(found[1]) or not _gathers_data(found[1])):
                found = None
        if found is None:
            digits = _solved_digits(eq, dom, rvars, in_reads, ctx)
            if digits is not None:
                solved, dom, guard = digits
                guards = [*guards, guard]
                for r, e in solved:
                    _compose(mapping, r, e)
                rvars = [x for x in rvars if all(x is not r for r, _ in solved)]
            continue
        r, e = found
        limits = dom.constraints_on(r).to_cond()
        guards = [simplify_expr(substitute(g, {r: e}), ctx) for g in guards]
        guards.append(simplify_expr(substitute(limits, {r: e}), ctx))
        _compose(mapping, r, e)
        dom, rvars = dom.project_out(r), [x for x in rvars if x is not r]
    # 3. tighten and deskew the remaining variables
    new_vars: list[Expr] = []
    shift: dict[Expr, Expr] = {}
    for r in rvars:
        if r in free:
            new_vars.append(r)
            continue
        lo, hi = dom.const_range(r)
        if ctx is not None:
            ctx.counts["lower bounds"] += 1
        candidates = dom.lower_bounds(r, outer)
        best = next(((b, ext) for b, ext in candidates
                     if free_vars(b) and decide(ext < hi - lo + 1)), None)
        if best is not None:
            b, ext = best
            nv = var(r.name, 0, ext)
            shift[r] = simplify_expr(b + nv, ctx)
        else:
            end = hi + 1 if isinstance(hi, int) else simplify_expr(hi + 1, ctx)
            nv = var(r.name, lo, end) if (lo, end) != (r.lo, r.hi) else r
            if nv is not r:
                shift[r] = nv
        new_vars.append(nv)
    # gist against the ranges that stay: a shifted variable's own bounds must survive
    kept = [v for v in dom.vars if v not in shift]
    cond = dom.gist(IndexSet.box(dom.vars, bounded=kept, space=space_of(dom.vars, ctx))).to_cond()
    if shift:
        for r, value in shift.items():
            _compose(mapping, r, value)
        guards = [simplify_expr(substitute(g, shift), ctx) for g in guards]
        cond, space_vars = simplify_expr(substitute(cond, shift), ctx), outer + new_vars
        space = space_of(space_vars, ctx)
        cond = IndexSet.from_conditions(space_vars, [cond], space).gist(
            IndexSet.box(space_vars, space=space)).to_cond()
    cond = simplify_expr(cond, ctx)
    return Plan(tuple(mapping.items()), tuple(new_vars), cond, tuple(guards))


def digit_equation(eq: Expr, rvars: Sequence[Expr]) -> tuple[list[tuple[Expr, int]], Linear] | None:
    """``(terms, rest)`` when ``eq`` says ``sum c_r r + rest == 0`` with ``terms`` the ``(r, c_r)`` of
    reduction variables of integer ranges and ``rest`` reading data, free of them (:func:`_solved_digits`)."""
    if eq.op is not Op.EQ or not dt.is_int(eq.src[0].dtype):
        return None
    f = to_linear(eq.src[0]) - to_linear(eq.src[1])
    mine = [(a, c) for a, c in f.terms if a in rvars]
    rest = Linear(tuple((a, c) for a, c in f.terms if a not in rvars), f.const)
    if not mine or any(set(free_vars(a)) & set(rvars) for a, _ in rest.terms) \
            or not any(reads_data(a) for a, _ in rest.terms) or any(type(b) is not int for r, _ in mine
                                                                  for b in (r.lo, r.hi)):
        return None
    return mine, rest


def _solved_digits(eq: Expr, dom: IndexSet, rvars: list[Expr], in_reads: set, ctx
                   ) -> tuple[list[tuple[Expr, Expr]], IndexSet, Expr] | None:
    """A data-dependent equation ``sum c_r r == e`` over several reduction variables (or one with a
    coefficient other than 1), ``e`` data free of them (``2 a + b == I[i]``, ``a, b`` in ``[0, 2)``), solved
    by isl with ``e`` as one more variable ``s``: each ``r`` a quasi-affine function of ``s`` and the others
    (``a = s // 2``, ``b = s % 2``), as ``([(r, value at s := e)], domain, guard)``; a variable a read's index
    takes is clipped into its range, exact where the guard (``s``'s constraints at ``e``) holds.  ``None``
    unless every variable of the equation is determined."""
    if (found := digit_equation(eq, rvars)) is None:
        return None
    mine, rest = found
    ends = [sorted((c * r.lo, c * (r.hi - 1))) for r, c in mine]
    s = var("s", sum(lo for lo, _ in ends), sum(hi for _, hi in ends) + 1)
    e = simplify_expr(from_linear(rest.scale(-1)), ctx)
    dom = IndexSet.from_conditions(dom.vars + [s], [dom.to_cond(), Expr(Op.EQ, dt.BOOL, (
        from_linear(Linear(tuple(mine), 0)), s))], space_of(dom.vars + [s], ctx))
    solved, ours = [], [r for r, _ in mine]
    for r in ours:  # (each as a function of ``s`` and the variables outside the equation)
        sol = reduce(IndexSet.project_out, [o for o in ours if o is not r], dom).solve(r)
        if sol is None or sol.pieces > MAX_PIECES:
            return None
        value = simplify_expr(substitute(sol.value, {s: e}), ctx)
        if r in in_reads:
            value = data_index(simplify_expr(value - r.lo, ctx), r.hi - r.lo, "clip") + r.lo
        solved.append((r, simplify_expr(value, ctx)))
    dom = reduce(IndexSet.project_out, ours, dom)
    guard = simplify_expr(substitute(dom.constraints_on(s).to_cond(), {s: e}), ctx)
    return solved, dom.project_out(s), guard


def apply_plan(plan: Plan, exprs: Sequence[Expr], ctx=None) -> list[Expr]:
    """``exprs`` with the plan's substitution applied (and simplified)."""
    mapping = dict(plan.mapping)
    return [simplify_expr(substitute(e, mapping), ctx) if mapping else e for e in exprs]


def guard_of(plan: Plan, residual: Sequence[Expr], ctx=None) -> tuple[Expr, Expr]:
    """The non-affine guard of a planned sum as ``(outer, inner)`` (``inner``: ``True`` when nothing
    nests): the substituted equations' range guards keep the residual conjuncts' reads in bounds, and a
    residual conjunct that may fault stays in an inner, lazy ``if_then_else`` (``&&`` computes both)."""
    guards = [c for g in plan.guards for c in conjuncts(simplify_expr(g, ctx))]
    rest = [c for p in apply_plan(plan, list(residual), ctx) for c in conjuncts(simplify_expr(p, ctx))]
    memo: dict = {}
    if guards and any(may_fault(c, memo) for c in rest):
        return all_of(guards), all_of(rest)
    return all_of(guards + rest), TRUE
