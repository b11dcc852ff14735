"""Integer index arithmetic: linear normal forms, comparisons, floor division and modulo: the integer half
of :mod:`.algebra.rules`' table.  A comparison of two linear forms (:mod:`tensorad.poly.linear`) is
decided by ranges where intervals suffice (:mod:`.algebra.ranges`), else written in one canonical form."""

from __future__ import annotations

import math

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, TRUE, Expr, Op, const, data_index
from tensorad.ir.rewrite import walk
from tensorad.poly.linear import Linear, from_linear, is_index, to_linear

from .ranges import bounds, linear_bounds


class IndexMemo:
    """The per-node index analyses of one optimizer call (linear forms, interval bounds, negations), owned
    by the call's :class:`.context.OptimizerContext`; without one, each call starts afresh."""

    __slots__ = ("forms", "bounds", "negations")

    def __init__(self) -> None:
        self.forms: dict = {}  # node -> Linear (tensorad.poly.linear.to_linear's memo)
        self.bounds: dict = {}  # node -> (lo, hi) (ranges.bounds' memo)
        self.negations: dict = {}  # comparison -> its canonical negation (or None)


def _forms(memo: IndexMemo | None) -> dict | None:
    return None if memo is None else memo.forms


def _reads_data(e: Expr) -> bool:
    return any(n.op in (Op.READ, Op.REDUCE) for n in walk(e))


def zero_like(e: Expr) -> Expr:
    return const(0, e.dtype)


def normalise_linear(node: Expr, memo: IndexMemo | None = None) -> Expr | None:
    """Integer ``+ - * neg``: collect coefficients (``2*(j + 3) - j`` -> ``j + 6``)."""
    if not is_index(node):
        return None
    out = from_linear(to_linear(node, _forms(memo)), node.dtype)
    if out is node:
        return None
    # Collected in exact integers, a constant may leave the dtype: exact index arithmetic there, while
    # int32 data wraps (``int32(-9.0) - int32(3e10)``); such a form is left as written (as fold_constant).
    lo, hi = dt.min_value(node.dtype), dt.max_value(node.dtype)
    return None if any(n.op is Op.CONST and not lo <= n.arg <= hi for n in walk(out)) else out


def form_bounds(f: Linear, memo: IndexMemo | None = None) -> tuple[int | None, int | None]:
    """Bounds of a linear form (:func:`.algebra.ranges.linear_bounds` over its atoms' bounds)."""
    if memo is None:
        return linear_bounds(f, bounds)
    return linear_bounds(f, lambda a: bounds(a, memo.bounds, memo.forms))


def _decide(op: Op, lo: int | None, hi: int | None) -> Expr | None:
    """Truth of ``L op 0`` for ``L`` in ``[lo, hi]``, when the interval decides it."""
    pos = lo is not None and lo > 0  # L > 0 everywhere
    neg = hi is not None and hi < 0  # L < 0 everywhere
    if op is Op.EQ or op is Op.NE:
        zero = lo is not None and lo == hi == 0
        if pos or neg:
            return FALSE if op is Op.EQ else TRUE
        return (TRUE if op is Op.EQ else FALSE) if zero else None
    nonpos = hi is not None and hi <= 0
    nonneg = lo is not None and lo >= 0
    if op is Op.LT:
        return TRUE if neg else FALSE if nonneg else None
    if op is Op.LE:
        return TRUE if nonpos else FALSE if pos else None
    if op is Op.GT:
        return TRUE if pos else FALSE if nonpos else None
    return TRUE if nonneg else FALSE if neg else None  # GE


def canonical_compare(node: Expr, memo: IndexMemo | None = None) -> Expr | None:
    """Integer ``a op b``: decided by ranges, else ``P == N`` / ``P != N`` / ``P <= N``: ``L = a - b``,
    ``L < 0`` as ``L + 1 <= 0``, the gcd divided out (the constant rounded safely), positive coefficients
    on both sides (``2*oh <= h``); one read of data alone on the left (``Winner[i] == 3*kh + kw``)."""
    a, b = node.src
    if not is_index(a):
        return None
    fa, fb = to_linear(a, _forms(memo)), to_linear(b, _forms(memo))
    # integer data wraps: an ordering of data is rewritten only when every side is proved within the type
    of_data = node.op not in (Op.EQ, Op.NE) and (_reads_data(a) or _reads_data(b))
    if of_data and not (_fits(fa, a.dtype, memo) and _fits(fb, a.dtype, memo)):
        return None
    f = fa - fb
    decided = _decide(node.op, *form_bounds(f, memo))
    if decided is not None:
        return decided
    op = node.op
    if op in (Op.LT, Op.GT, Op.GE):
        f = {Op.LT: f + Linear((), 1), Op.GT: f.scale(-1) + Linear((), 1), Op.GE: f.scale(-1)}[op]
        op = Op.LE
    g = 0
    for _, k in f.terms:
        g = math.gcd(g, k)
    if g > 1:
        if op is Op.LE:
            f = Linear(tuple((t, k // g) for t, k in f.terms), -((-f.const) // g))
        elif f.const % g:
            return FALSE if op is Op.EQ else TRUE
        else:
            f = Linear(tuple((t, k // g) for t, k in f.terms), f.const // g)
    if op is not Op.LE:
        data = [(t, k) for t, k in f.terms if _reads_data(t)]
        if len(data) == 1 and abs(data[0][1]) == 1:  # Winner[i] == 3*kh + kw: the read alone
            t, k = data[0]
            rest = (f - Linear(((t, k),), 0)).scale(-k)
            out = Expr(op, dt.BOOL, (t, from_linear(rest, a.dtype)))
            return None if out is node else out
        if f.terms and f.terms[0][1] < 0:
            f = f.scale(-1)
    pos = Linear(tuple((t, k) for t, k in f.terms if k > 0), 0)
    neg = Linear(tuple((t, -k) for t, k in f.terms if k < 0), 0)
    if op is not Op.LE or pos.terms:  # P + c op N  ->  P op N - c
        lhs, rhs = pos, neg + Linear((), -f.const)
    else:  # c - N <= 0  ->  c <= N
        lhs, rhs = Linear((), f.const), neg
    if of_data and not (_fits(lhs, a.dtype, memo) and _fits(rhs, a.dtype, memo)):
        return None
    out = Expr(op, dt.BOOL, (from_linear(lhs, a.dtype), from_linear(rhs, a.dtype)))
    return None if out is node else out


def _fits(f: Linear, dtype: str, memo: IndexMemo | None) -> bool:
    """Whether the exact value of form ``f`` is proved within ``dtype`` (+ - * are exact modulo 2^bits)."""
    lo, hi = form_bounds(f, memo)
    return lo is not None and hi is not None and dt.min_value(dtype) <= lo and hi <= dt.max_value(dtype)


_FLIP = {Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT, Op.EQ: Op.NE, Op.NE: Op.EQ}


def negate(c: Expr, memo: IndexMemo | None = None) -> Expr | None:
    """``!c`` without a NOT node when ``c`` is an integer comparison or a constant."""
    if c.op is Op.CONST:
        return FALSE if c.arg else TRUE
    if c.op in _FLIP and is_index(c.src[0]):
        if memo is not None and c in memo.negations:
            return memo.negations[c]
        flipped = Expr(_FLIP[c.op], dt.BOOL, c.src)
        canon = canonical_compare(flipped, memo)  # in the normal form the simplifier produces
        out = flipped if canon is None else canon
        if memo is not None:
            memo.negations[c] = out
        return out
    return c.src[0] if c.op is Op.NOT else None


def _split_multiple(f: Linear, c: int) -> tuple[Linear, Linear]:
    """``f = c*Q + R``: Q takes the terms (and constant part) divisible by ``c``."""
    q = Linear(tuple((t, k // c) for t, k in f.terms if k % c == 0), f.const // c)
    r = Linear(tuple((t, k) for t, k in f.terms if k % c), f.const % c)
    return q, r


def floordiv_rule(node: Expr, a: Expr, b: Expr, memo: IndexMemo | None = None) -> Expr | None:
    """``(c*Q + R) // c -> Q + R // c``; ``R // c -> 0`` when ``0 <= R < c``."""
    if not (is_index(node) and b.op is Op.CONST and b.arg > 0):
        return None
    c = int(b.arg)
    if c == 1:
        return a
    if a.op is Op.FLOORDIV and a.src[1].op is Op.CONST and a.src[1].arg > 0:  # (x//p)//c = x//(p c)
        return Expr(Op.FLOORDIV, node.dtype, (a.src[0], const(int(a.src[1].arg) * c, node.dtype)))
    q, r = _split_multiple(to_linear(a, _forms(memo)), c)
    lo, hi = form_bounds(r, memo)
    if lo is not None and hi is not None and 0 <= lo and hi < c:
        return from_linear(q, node.dtype)
    if q.is_const and q.const == 0:
        return None
    rest = Expr(Op.FLOORDIV, node.dtype, (from_linear(r, node.dtype), b))
    return from_linear(q + Linear(((rest, 1),), 0), node.dtype)


def mod_rule(node: Expr, a: Expr, b: Expr, memo: IndexMemo | None = None) -> Expr | None:
    """``(c*Q + R) % c -> R % c``; ``R % c -> R`` when ``0 <= R < c``."""
    if not (is_index(node) and b.op is Op.CONST and b.arg > 0):
        return None
    c = int(b.arg)
    if c == 1:
        return zero_like(node)
    f = to_linear(a, _forms(memo))
    _, r = _split_multiple(f, c)
    lo, hi = form_bounds(r, memo)
    if lo is not None and hi is not None and 0 <= lo and hi < c:
        return from_linear(r, node.dtype)
    return None if r == f else Expr(Op.MOD, node.dtype, (from_linear(r, node.dtype), b))


def minmax_rule(node: Expr, a: Expr, b: Expr, memo: IndexMemo | None = None) -> Expr | None:
    """Integer max/min decided by the ranges of ``a - b``."""
    if not is_index(node):
        return None
    lo, hi = form_bounds(to_linear(a, _forms(memo)) - to_linear(b, _forms(memo)), memo)
    a_wins = (lo is not None and lo >= 0) if node.op is Op.MAXIMUM else (hi is not None and hi <= 0)
    b_wins = (hi is not None and hi <= 0) if node.op is Op.MAXIMUM else (lo is not None and lo >= 0)
    return a if a_wins else b if b_wins else None


def data_address(node: Expr) -> Expr | None:
    """``D == v``, ``D`` an integer read of data and ``v`` an index variable over ``[lo, hi)``, ``lo >= 0``:
    ``lo <= D && D < hi && data_index(D, hi, clip) == v``, the same test with ``D`` as an address (a gather
    index), so that a sum over ``v`` is solved by it (``sum_c [L[n] == c] W[c]`` is ``W[L[n]]``) and a sum
    over ``D``'s own axes is a scatter-add (``dW[c] = sum_n [L[n] == c] H[n]``)."""
    a, b = node.src
    if a.op is not Op.READ:
        a, b = b, a
    v = b.src[0] if b.op is Op.CAST else b
    if a.op is not Op.READ or not is_index(a) or v.op is not Op.VAR or v.lo is None or v.hi is None \
            or v.lo < 0 or not is_index(v) or v.hi > min(dt.max_value(a.dtype), dt.max_value(b.dtype)):
        return None
    address = Expr(Op.EQ, dt.BOOL, (data_index(a, v.hi, "clip"), v))
    lo = Expr(Op.GE, dt.BOOL, (a, const(v.lo, a.dtype)))
    hi = Expr(Op.LT, dt.BOOL, (a, const(v.hi, a.dtype)))
    return Expr(Op.AND, dt.BOOL, (Expr(Op.AND, dt.BOOL, (lo, hi)), address))
