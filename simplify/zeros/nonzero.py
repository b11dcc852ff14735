"""Nonzeroness: a condition under which an expression may be nonzero, and using it.

``nonzero(e)`` over-approximates where ``e != 0`` under the *strong* reading, where a zero times or
divided by anything is zero: the one licensed difference of optimized code (docs/conventions.md;
:mod:`.algebra.rules` itself is exact).  It is a fold over :data:`NZ_RULES`:

    nz(c)                  = c != 0                  constants
    nz(select(c, a, b))    = c && nz(a) || !c && nz(b)
    nz(a * b)              = nz(a) && nz(b)
    nz(a / b)              = nz(a)
    nz(a + b), nz(a - b)   = nz(a) || nz(b)
    nz(-a), nz(T(a))       = nz(a)               (a cast of a condition c: c itself)
    nz(f(a))               = nz(a)   for f(0) = 0: tanh, sqrt, abs, sin
    nz(a ** p)             = nz(a)   for a constant p > 0 (0 ** 0 = 1: else True)
    nz(T[idx])             = guard(T)[axes := idx]   (see :func:`tensor_guard`)
    nz(exp(a))             = fin(a)                  (see :func:`finite_guard`)
    nz(anything else)      = True                variables, log, reductions, ...

``fin(a)`` is where ``a`` may be above ``-inf``: a score masked with ``if_then_else(c, s, -inf)``
and shifted by its row's maximum, ``exp(masked - m)``, is zero outside ``c``, the same strong
reading (``-inf - m`` is ``-inf``, as ``0 / m`` is ``0``).

:func:`assume` simplifies an expression under facts known to hold: each fact becomes ``True``."""

from __future__ import annotations

from collections.abc import Iterable

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, TRUE, Expr, Op, const
from tensorad.ir.rewrite import chain, fold, fold_pure, reads, rewrite, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.domain import affine_part

from ..algebra.index import negate
from ..algebra.logic import all_of, any_of, implied_conjuncts
from ..algebra.rules import simplify_expr

MAX_GUARD_NODES = 400  # a tensor's guard larger than this is not kept (it would enter every read)


def _and(a: Expr, b: Expr) -> Expr:
    return FALSE if a is FALSE or b is FALSE else all_of([x for x in (a, b) if x is not TRUE])


def _or(a: Expr, b: Expr) -> Expr:
    return TRUE if a is TRUE or b is TRUE else any_of([x for x in (a, b) if x is not FALSE])


def _choice(n: Expr, c: Expr, a: Expr, b: Expr) -> Expr:
    cond = n.src[0]
    then = _and(cond, a)
    if b is FALSE:
        return then
    notc = negate(cond)
    other = _and(notc if notc is not None else Expr(Op.NOT, dt.BOOL, (cond,)), b)
    return _or(then, other)


def _const(n: Expr) -> Expr:
    return FALSE if (n.dtype != dt.BOOL and n.arg == 0) else TRUE


def _cast(n: Expr, a: Expr) -> Expr:
    return n.src[0] if n.src[0].dtype == dt.BOOL else a


def _same(n: Expr, a: Expr, *rest: Expr) -> Expr:
    return a


def _positive_const(e: Expr) -> bool:
    """``e`` is a constant > 0 (the exponent itself: ``0 ** 0 = 1``, ``0 ** -1 = inf``)."""
    return e.op is Op.CONST and e.dtype != dt.BOOL and e.arg > 0


def _neg_inf(e: Expr) -> bool:
    return e.op is Op.CONST and e.dtype != dt.BOOL and e.arg == float("-inf")


def finite_guard(e: Expr) -> Expr:
    """A condition outside which ``e`` is ``-inf`` (``True`` if none is known): of a choice, as
    :func:`_choice`; of ``a + b`` either's; of ``a - b`` and ``a * p`` (a constant ``p > 0``) ``a``'s;
    of a read of a tensor ``if_then_else(c, v, -inf)`` (or ``select``), ``c`` at the read's indices."""
    op = e.op
    if _neg_inf(e):
        return FALSE
    if op in (Op.SELECT, Op.IF_THEN_ELSE):
        return _choice(e, e.src[0], finite_guard(e.src[1]), finite_guard(e.src[2]))
    if op is Op.ADD:
        return _and(finite_guard(e.src[0]), finite_guard(e.src[1]))
    if op is Op.SUB or (op is Op.MUL and _positive_const(e.src[1])):
        return finite_guard(e.src[0])
    if op is Op.READ and isinstance(e.arg.op, ComputeOp):
        body = e.arg.op.body[e.arg.value_index]
        if body.op in (Op.SELECT, Op.IF_THEN_ELSE) and _neg_inf(body.src[2]) \
                and not any(n.op in (Op.READ, Op.REDUCE) for n in walk(body.src[0])):
            return substitute(body.src[0], dict(zip(e.arg.op.axes, e.src)))
    return TRUE


NZ_RULES = {
    Op.CONST: _const,                                  # nz(c) = c != 0
    Op.SELECT: _choice,                                # nz(sel(c,a,b)) = c&&nz(a) || !c&&nz(b)
    Op.IF_THEN_ELSE: _choice,                          # (same for the lazy choice)
    Op.MUL: lambda n, a, b: _and(a, b),                # nz(a*b) = nz(a) && nz(b)
    Op.DIV: _same,                                     # nz(a/b) = nz(a)
    Op.FLOORDIV: _same,                                # nz(a//b) <= nz(a)
    Op.MOD: _same,                                     # nz(a%b) <= nz(a)
    Op.ADD: lambda n, a, b: _or(a, b),                 # nz(a+b) <= nz(a) || nz(b)
    Op.SUB: lambda n, a, b: _or(a, b),                 # nz(a-b) <= nz(a) || nz(b)
    Op.MAXIMUM: lambda n, a, b: _or(a, b),             # max(0, 0) = 0
    Op.MINIMUM: lambda n, a, b: _or(a, b),             # min(0, 0) = 0
    Op.NEG: _same,                                     # nz(-a) = nz(a)
    Op.CAST: _cast,                                    # nz(T(c)) = c; nz(T(a)) = nz(a)
    Op.TANH: _same, Op.SQRT: _same, Op.ABS: _same, Op.SIN: _same,  # f(0) = 0
    Op.ERF: _same,                                     # erf(0) = 0 (odd, zero only at 0)
    Op.EXP: lambda n, a: finite_guard(n.src[0]),       # exp(-inf) = 0
    Op.READ: lambda n, *idx: read_nonzero(n),          # nz(T[idx]) = T's guard at idx
    Op.POW: lambda n, a, b: a if _positive_const(n.src[1]) else TRUE,  # 0**p = 0 for p > 0 only
}
for _op in (Op.VAR, Op.REDUCE, Op.LOG, Op.SIGMOID, Op.COS, Op.DATA_INDEX):
    NZ_RULES[_op] = lambda n, *a: TRUE                 # may be nonzero anywhere
for _op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.NOT):
    NZ_RULES[_op] = lambda n, *a: n                    # a condition is its own nonzeroness


def tensor_guard(t: Tensor, guards: dict | None = None) -> Expr:
    """A condition on ``t``'s axes outside which ``t`` is zero (``True`` if none is known): of a reduction
    whose combiner keeps zeros (:func:`_keeps_zeros`), the conjuncts of its where and of its term's
    nonzeroness free of reduction variables (of a disjunction, those of every disjunct); of any other
    body, its nonzeroness (:data:`NZ_RULES`, reads of tensors by their guards) with every part that reads
    data weakened to ``True``: ``if_then_else(c, e, 0) + U[i]`` is zero outside ``c || guard(U)[i]``; and
    what comparisons of gather indices say of the axes (:func:`~tensorad.poly.domain.affine_part`).
    ``guards``: a table ``tensor -> guard`` to read and fill; the guards a body needs are found first,
    producers before readers, without recursion (a chain may be thousands of tensors long)."""
    table = {} if guards is None else guards
    stack = [t]
    while stack:
        u = stack[-1]
        if u in table:
            stack.pop()
            continue
        body = u.op.body[u.value_index] if isinstance(u.op, ComputeOp) else None
        pending = [] if body is None or body.op is Op.REDUCE and not _keeps_zeros(body) else \
            [r for r in reads(body) if r not in table]
        if pending:
            stack += pending
            continue
        stack.pop()
        table[u] = _own_guard(u, table)
    return table[t]


def _own_guard(t: Tensor, table: dict) -> Expr:
    """:func:`tensor_guard` of ``t`` once ``table`` holds the guards of the tensors its body reads."""
    op = t.op
    if not isinstance(op, ComputeOp):
        return TRUE
    body = op.body[t.value_index]
    rules = {**NZ_RULES, Op.READ: lambda n, *idx: read_nonzero(n, table)}
    if body.op is not Op.REDUCE:
        return _and(_without_reads(terms := fold(body, rules)), affine_part(terms, op.axes))
    if not _keeps_zeros(body):
        return TRUE
    terms, bound = _and(body.src[0], fold(body.src[1 + body.arg.value_index], rules)), set(body.arg.axes)
    kept = _without_reads(all_of([c for c in implied_conjuncts(terms) if not bound & set(walk(c))]))
    return _and(kept, affine_part(terms, op.axes))  # (what weakening each part that reads data loses)


def _keeps_zeros(red: Expr) -> bool:
    """The reduction ``red``'s combiner folds zero terms to zero from a zero identity (a sum, the added
    part of a recurrence's pairs): ``red`` is zero where every term is."""
    comb, v = red.arg.combiner, red.arg.value_index
    zero = dict.fromkeys((comb.lhs[v], comb.rhs[v]), const(0, comb.lhs[v].dtype))
    return fold(comb.identity[v], NZ_RULES) is FALSE \
        and fold(substitute(comb.result[v], zero), NZ_RULES) is FALSE


def _without_reads(c: Expr) -> Expr:
    """``c`` weakened: each part of its ``&&``/``||`` tree that reads a tensor becomes ``True``, each
    repeated conjunct or disjunct is kept once (a chain's guards nest one condition in each link), and a
    guard of more than :data:`MAX_GUARD_NODES` nodes becomes ``True``."""
    data: dict = {}
    fold(c, lambda n, *a: n.op in (Op.READ, Op.REDUCE) or any(a), data)

    def weak(x: Expr) -> Expr:
        if x.op is Op.AND:
            return all_of(y for y in map(weak, chain(x, Op.AND)) if y is not TRUE)
        if x.op is Op.OR:
            parts = [weak(y) for y in chain(x, Op.OR)]
            return TRUE if any(y is TRUE for y in parts) else any_of(parts)
        return TRUE if data[x] else x

    out = weak(c)
    return TRUE if sum(1 for _ in walk(out)) > MAX_GUARD_NODES else out


def read_nonzero(n: Expr, guards: dict | None = None) -> Expr:
    """``nz(T[idx])``: the guard of ``T`` with its axes replaced by the indices (``guards``:
    a table of tensor guards, ``tensor -> guard``, to read and fill)."""
    t = n.arg
    guard = tensor_guard(t, guards)
    return TRUE if guard is TRUE else substitute(guard, dict(zip(t.op.axes, n.src)))


def nonzero(e: Expr, ctx=None) -> Expr:
    """A (simplified) condition outside which ``e`` is zero (``ctx``: see :func:`.simplify_expr`); with a
    context, the fold's values and the tensors' guards are the call's (``ctx.nz``, ``ctx.nz_rules``)."""
    if ctx is None:
        return simplify_expr(fold(e, NZ_RULES), ctx)
    if ctx.nz_rules is None:
        guards = ctx.tensor_guards
        ctx.nz_rules = {**NZ_RULES, Op.READ: lambda n, *idx: read_nonzero(n, guards)}
    return simplify_expr(fold_pure(e, ctx.nz_rules, ctx.nz), ctx)


def assume(e: Expr, facts: Iterable[Expr], ctx=None) -> Expr:
    """``e`` simplified where every condition in ``facts`` holds (facts become ``True``).  A constant fact
    adds nothing (under ``False`` any answer will do) and must not enter the mapping, where
    ``False -> True`` beside ``True -> False`` would swap the constants forever."""
    mapping = {}
    for f in facts:
        if f.op is Op.CONST:
            if f.arg:
                continue
            return e
        mapping[f] = TRUE
        neg = negate(f, None if ctx is None else ctx.index)
        if neg is not None:
            mapping[neg] = FALSE
    if not mapping:
        return e
    return simplify_expr(rewrite(e, lambda n: mapping.get(n) if n.dtype == dt.BOOL else None), ctx)
