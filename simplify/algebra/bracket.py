"""One spelling for a bracket sum, whatever the axes it was written over.

:mod:`.sums.factor`'s *brackets* reach it over different variables (group norm sums per group ``G`` and
channel ``j`` what ``gamma``'s sums per channel ``c = 2G + j``).  :func:`canonical` rewrites a bracket to
one key of the call's op table:

* a unit variable (a range of one point) is its constant;
* *digits merge*: free variables ``G in [0, M)``, ``j in [0, s)`` read as ``s*G + j`` become one
  ``c in [0, M*s)`` with ``G = c // s``, ``j = c % s`` (a bijection: exact);
* the free variables and the sum's own are ordered by first appearance in the body.

The result is a :class:`Spelling` ``(axes, body, index, back)``: the original is ``T[index]`` for
``T[axes] = body``, and ``T[axes]`` is the original at the free variables ``back``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import substitute, walk
from tensorad.poly.linear import to_linear

from .rules import simplify_expr

MAX_MERGES = 8


class Spelling(NamedTuple):
    """A bracket in its canonical spelling: ``T[axes] = body``, the original ``T[index]``; the original's
    free variables are ``back`` over ``axes`` (``T[axes]`` is the original there)."""

    axes: tuple[Expr, ...]
    body: Expr
    index: tuple[Expr, ...]
    back: tuple[Expr, ...]


def _first_seen(body: Expr, candidates: Sequence[Expr]) -> list[Expr]:
    want = set(candidates)
    order = [n for n in walk(body) if n in want]
    return order + [v for v in candidates if v not in order]


def _digit_pair(body: Expr, free: set) -> tuple[Expr, Expr, int] | None:
    """``(G, j, s)``: free variables some read index holds as ``k*(s*G + j)``, ``j in [0, s)``."""
    memo: dict = {}
    for n in walk(body):
        if n.op is not Op.READ:
            continue
        for idx in n.src:
            f = to_linear(idx, memo)
            terms = [(a, k) for a, k in f.terms if a in free]
            for j, kj in terms:
                if j.lo != 0 or not isinstance(j.hi, int) or j.hi < 2:  # (a digit base is an int)
                    continue
                s = j.hi
                for g, kg in terms:
                    if g is not j and g.lo == 0 and g.hi is not None and kg == s * kj:
                        return g, j, s
    return None


def _simplify(body: Expr, ctx) -> Expr:
    if body.op is not Op.REDUCE:
        return simplify_expr(body, ctx)
    return Expr(Op.REDUCE, body.dtype, tuple(simplify_expr(s, ctx) for s in body.src), body.arg)


def canonical(free: Sequence[Expr], body: Expr, ctx=None) -> Spelling:
    """``(axes, body', index, back)`` with ``body == body'[axes := index]`` and
    ``body' == body[free := back]`` (see the module docstring)."""
    of: dict[Expr, Expr] = {}  # current free variable -> its value over the original ones
    unit = {v: const(v.lo, v.dtype) for v in free if v.lo is not None and v.hi == v.lo + 1}
    cur = [v for v in free if v not in unit]
    back = {v: unit.get(v, v) for v in free}  # original free variable -> its value over the current ones
    for v in cur:
        of[v] = v
    if unit:
        body = _simplify(substitute(body, unit), ctx)
    for _ in range(MAX_MERGES):
        pair = _digit_pair(body, set(cur))
        if pair is None:
            break
        g, j, s = pair
        c = var(f"{g.name}_{j.name}", 0, g.hi * s, g.dtype)
        digits = {g: c // s, j: c % s}
        body = _simplify(substitute(body, digits), ctx)
        back = {v: substitute(e, digits) for v, e in back.items()}
        of[c] = of[g] * s + of[j]
        cur[cur.index(g)] = c
        cur.remove(j)
    order = _first_seen(body, cur)
    # axes start at 0, as the language's do: a free variable of range [lo, hi) is read at ``v - lo``
    low = {v: v.lo if v.lo and v.hi is not None else 0 for v in order}
    axes = tuple(var(f"_b{k}", v.lo if not low[v] else 0, v.hi - low[v] if low[v] else v.hi, v.dtype)
                 for k, v in enumerate(order))
    mapping = {v: a + low[v] if low[v] else a for v, a in zip(order, axes)}
    if body.op is Op.REDUCE:
        ra = body.arg
        rvars = _first_seen(Expr(Op.REDUCE, body.dtype, body.src, ra), list(ra.axes))
        fresh = {r: var(f"_r{k}", r.lo, r.hi, r.dtype) for k, r in enumerate(rvars)}
        mapping |= fresh
        body = Expr(Op.REDUCE, body.dtype, tuple(substitute(s, mapping) for s in body.src),
                    ReduceArg(ra.combiner, tuple(fresh[r] for r in rvars), ra.value_index))
    else:
        body = substitute(body, mapping)
    return Spelling(axes, _simplify(body, ctx),
                    tuple(simplify_expr(of[v] - low[v] if low[v] else of[v], ctx) for v in order),
                    tuple(simplify_expr(substitute(back[v], mapping), ctx) for v in free))
