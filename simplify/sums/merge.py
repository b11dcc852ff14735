"""Merge sums over the same domain: ``R1[idx] + R2[idx]`` -> one reduction.

Autodiff gives every read site its own reduction; after solving, several often iterate over the same
points.  The additive terms of a body that read sums with equal domains (indices, reduction ranges and
where-condition, reduction variables renamed by position) become a read of one sum of their sources; a read
under a guard, ``if_then_else(g, R[idx], 0)``, is a sum whose where-condition holds ``g`` too.  A read times
factors of the body's axes, ``H * (2 * R1[idx])``, merges with reads times the same factors, which then scale
the one sum (a loss over a Gram matrix: ``E F + E^T F`` as one product of the summed head).  Only sums the
caller allows (``mergeable``) are merged."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import reduce
from itertools import combinations

from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import chain, substitute
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.domain import IndexSet

from ..algebra.logic import all_of, any_of
from ..algebra.rules import is_zero, simplify_expr
from ..zeros.nonzero import nonzero
from .eliminate import domain_conjuncts

Terms = list[tuple[int, Expr]]


def additive_terms(e: Expr) -> Terms:
    """``e`` as ``sum(sign * term)`` over its top-level ``+``, ``-`` and negations, a guard
    ``if_then_else(g, a + b, 0)`` distributed over its terms."""
    out: Terms = []
    stack = [(1, e)]
    while stack:
        sign, x = stack.pop()
        if x.op is Op.ADD:
            stack += [(sign, x.src[1]), (sign, x.src[0])]
        elif x.op is Op.SUB:
            stack += [(-sign, x.src[1]), (sign, x.src[0])]
        elif x.op is Op.NEG:
            stack.append((-sign, x.src[0]))
        elif _guard(x) is not None and x.src[1].op in (Op.ADD, Op.SUB, Op.NEG):
            stack += [(sign * s, Expr(x.op, x.dtype, (x.src[0], t, x.src[2])))
                      for s, t in reversed(additive_terms(x.src[1]))]
        else:
            out.append((sign, x))
    return out


def _guard(x: Expr) -> Expr | None:
    """``g`` of ``if_then_else(g, a, 0)``."""
    return x.src[0] if x.op is Op.IF_THEN_ELSE and is_zero(x.src[2]) else None


def _sum_read(t: Expr, mergeable: Callable[[ComputeOp], bool]) -> tuple[Expr, Expr] | None:
    """``(read, guard)`` of a term that reads a sum ``mergeable`` allows, alone or under a guard."""
    guard = _guard(t)
    read = t if guard is None else t.src[1]
    if read.op is Op.READ and isinstance(read.arg.op, ComputeOp) and read.arg.op.is_reduction \
            and read.arg.op.num_outputs == 1 and read.arg.op.body[0].arg.combiner.kind == "sum" \
            and mergeable(read.arg.op):
        return read, TRUE if guard is None else guard
    return None


def _scaled_sum_read(t: Expr, mergeable: Callable[[ComputeOp], bool],
                     scaled: Callable[[ComputeOp], bool]) -> tuple[Expr | None, tuple] | None:
    """``(scale, (read, guard))`` of a term ``scale * read`` (``scale`` ``None`` for a read alone), one
    factor of its product chain a sum :func:`_sum_read` accepts (with ``scaled`` when it is scaled);
    else ``None``."""
    found = _sum_read(t, mergeable)
    if found is not None or t.op is not Op.MUL:
        return None if found is None else (None, found)
    factors = chain(t, Op.MUL)
    hits = [k for k, f in enumerate(factors) if _sum_read(f, scaled) is not None]
    if len(hits) != 1:
        return None
    scale = reduce(operator.mul, [f for k, f in enumerate(factors) if k != hits[0]])
    return scale, _sum_read(factors[hits[0]], scaled)


def _positional(pos: dict, k: int, v: Expr) -> Expr:
    """The ``k``-th reduction variable of range ``v``'s, shared within one merge (``pos``)."""
    key = (k, v.lo, v.hi)
    if key not in pos:
        pos[key] = var(f"_m{k}", v.lo, v.hi)
    return pos[key]


def _instantiate(read: Expr, pos: dict) -> tuple[tuple, Expr, Expr, ReduceArg]:
    """The sum read by ``read`` at its indices, reduction variables renamed by position; the
    key holds the ranges and dtype (sums of one key iterate over one box)."""
    op: ComputeOp = read.arg.op
    red = op.body[0]
    rv = red.arg.axes
    mapping = dict(zip(op.axes, read.src)) | {r: _positional(pos, k, r) for k, r in enumerate(rv)}
    cond = substitute(red.src[0], mapping)
    src = substitute(red.src[1], mapping)
    key = (tuple((r.lo, r.hi) for r in rv), red.dtype)
    return key, cond, src, red.arg


def _overlap_saves(axes: Sequence[Expr], rvars: Sequence[Expr], conds: Sequence[Expr]) -> bool:
    """Whether one nest over the union of the domains ``conds`` runs its body fewer times: two intersect."""
    variables = list(axes) + list(rvars)
    if any(v.lo is None or v.hi is None for v in variables):
        return False
    try:
        space = IndexSpace(variables)
        sets = [IndexSet.from_conditions(variables, [c], space).set for c in conds]
        return any(not a.intersect(b).is_empty() for a, b in combinations(sets, 2))
    except (NotAffine, ValueError, TypeError):
        return False


def _split_by_cond(group: list[int], inst: dict, axes: Sequence[Expr], pos: dict,
                   ctx=None) -> list[list[int]]:
    """``group`` (sums over one box) as the lists to merge: equal conditions always; different
    ones only all together, when their union saves body runs (:func:`_overlap_saves`) and none
    of them is a scatter (:func:`_scatters`)."""
    by_cond: dict[Expr, list[int]] = {}
    for k in group:
        by_cond.setdefault(inst[k][0], []).append(k)
    if len(by_cond) == 1:
        return [group]
    rvars = [_positional(pos, j, r) for j, r in enumerate(inst[group[0]][2].axes)]
    variables = list(axes) + rvars
    if any(_scatters(inst[k][1], variables, ctx) for k in group):
        return list(by_cond.values())
    return [group] if _overlap_saves(axes, rvars, list(by_cond)) else list(by_cond.values())


def _scatters(src: Expr, variables: Sequence[Expr], ctx) -> bool:
    """Whether ``src`` is nonzero only where a data-dependent integer equation holds: its sum runs
    over that equation's solutions, not over a union's box."""
    return bool(domain_conjuncts(nonzero(src, ctx), variables, ctx)[1])


def merge_sums(axes: Sequence[Expr], body: Expr, mergeable: Callable[[ComputeOp], bool],
               make: Callable[[str, Sequence[Expr], Expr, bool], Tensor], name: str,
               ctx=None, scaled: Callable[[ComputeOp], bool] | None = None) -> Expr | None:
    """``body`` with same-domain sums among its additive terms merged, or ``None``; ``scaled`` (by default
    ``mergeable``) allows the sums read times other factors.  ``make(name, axes, body, scaled)`` makes a
    merged sum (``scaled``: of scaled reads)."""
    if body.op is Op.REDUCE:
        return None
    terms = additive_terms(body)
    pos: dict = {}
    groups: dict[tuple, list[int]] = {}
    inst: dict[int, tuple] = {}
    scales: dict[int, Expr | None] = {}
    for k, (_, t) in enumerate(terms):
        hit = _scaled_sum_read(t, mergeable, scaled or mergeable)
        if hit is not None:
            scales[k], found = hit
            key, cond, src, ra = _instantiate(found[0], pos)
            inst[k] = (cond if found[1] is TRUE else simplify_expr(all_of([found[1], cond]), ctx), src, ra)
            groups.setdefault((key, id(scales[k])), []).append(k)
    merged = [h for g in groups.values() if len(g) > 1 for h in _split_by_cond(g, inst, axes, pos, ctx)
              if len(h) > 1]
    if not merged:
        return None
    replaced: dict[int, Expr | None] = {}
    for n, group in enumerate(merged):
        conds = list(dict.fromkeys(inst[k][0] for k in group))
        cond, _, ra = inst[group[0]]
        if len(conds) > 1:  # one nest over the union: each source where its own sum runs
            cond = any_of(conds)
        src = None
        for k in group:
            sign, s = terms[k][0], inst[k][1]
            if len(conds) > 1 and inst[k][0] is not TRUE:
                s = Expr(Op.IF_THEN_ELSE, s.dtype, (inst[k][0], s, const(0, s.dtype)))
            src = (s if sign > 0 else -s) if src is None else (src + s if sign > 0 else src - s)
        canon = ra.axes  # original variables of the first sum, renamed back from positions
        fresh = {_positional(pos, j, r): var(r.name, r.lo, r.hi) for j, r in enumerate(canon)}
        red = Expr(Op.REDUCE, src.dtype, (substitute(cond, fresh), substitute(src, fresh)),
                   ReduceArg(ra.combiner, tuple(fresh[_positional(pos, j, r)] for j, r in enumerate(canon)),
                             0))
        scale = scales[group[0]]
        t = make(f"{name}.m{n}", axes, red, scale is not None)
        replaced[group[0]] = t[tuple(axes)] if scale is None else scale * t[tuple(axes)]
        for k in group[1:]:
            replaced[k] = None
    out: Expr | None = None
    for k, (sign, t) in enumerate(terms):
        if k in replaced:
            if replaced[k] is None:
                continue
            t, sign = replaced[k], 1
        out = (t if sign > 0 else -t) if out is None else (out + t if sign > 0 else out - t)
    return simplify_expr(out, ctx)
