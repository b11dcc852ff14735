"""Split a sum's source into terms that are nonzero in different places (DESIGN.md lesson 1).

``sum_k H[k] * (select(k == j, 1, 0) + select(9 - k == j, 1, 0))`` determines no variable; distributed, it
is two sums, each with an equation that eliminates ``k``.  :func:`expand` writes an expression as a signed
sum of terms (a fold over :data:`EXPAND_RULES`: products distribute, ``select(c, a, b)`` is
``select(c, a, 0) + select(!c, b, 0)``, a quotient keeps its denominator), bounded by :data:`MAX_TERMS`;
:func:`group_terms` groups them by nonzeroness."""

from __future__ import annotations

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, Expr, Op, const, signed_sum
from tensorad.ir.rewrite import fold

from ..algebra.index import negate
from ..algebra.rules import simplify_expr
from ..zeros.nonzero import nonzero

MAX_TERMS = 16
Terms = list[tuple[int, Expr]]  # (sign, term)


def _atom(n: Expr, *args) -> Terms:
    return [] if n.op is Op.CONST and n.arg == 0 else [(1, n)]


def _neg(ts: Terms) -> Terms:
    return [(-s, t) for s, t in ts]


def _product(n: Expr, a: Terms, b: Terms) -> Terms:
    if len(a) * len(b) > MAX_TERMS:
        return [(1, n)]
    return [(sa * sb, Expr(Op.MUL, n.dtype, (ta, tb))) for sa, ta in a for sb, tb in b]


def _gate(n: Expr, c: Expr, ts: Terms) -> Terms:
    return [(s, Expr(n.op, n.dtype, (c, t, const(0, n.dtype)))) for s, t in ts]


def _choice(n: Expr, c: Terms, a: Terms, b: Terms) -> Terms:
    cond, then, other = n.src
    if n.dtype == dt.BOOL or len(a) + len(b) > MAX_TERMS:
        return [(1, n)]
    notc = negate(cond)
    notc = notc if notc is not None else Expr(Op.NOT, dt.BOOL, (cond,))
    return _gate(n, cond, a) + _gate(n, notc, b)


def _div(n: Expr, a: Terms, b: Terms) -> Terms:
    return [(s, Expr(Op.DIV, n.dtype, (t, n.src[1]))) for s, t in a]


def _cast(n: Expr, a: Terms) -> Terms:
    # (rounding to a half type is not linear: it stays one term)
    if not (dt.is_float(n.dtype) and dt.is_float(n.src[0].dtype)) or dt.is_half(n.dtype):
        return [(1, n)]
    return [(s, Expr(Op.CAST, n.dtype, (t,))) for s, t in a]


EXPAND_RULES = {
    Op.ADD: lambda n, a, b: a + b if len(a) + len(b) <= MAX_TERMS else [(1, n)],  # a + b
    Op.SUB: lambda n, a, b: a + _neg(b) if len(a) + len(b) <= MAX_TERMS else [(1, n)],  # a - b
    Op.NEG: lambda n, a: _neg(a),                    # -(a) flips every sign
    Op.MUL: _product,                                # (a1 + a2) * b = a1*b + a2*b
    Op.DIV: _div,                                    # (a1 + a2) / b = a1/b + a2/b
    Op.SELECT: _choice,                              # sel(c, a, b) = sel(c, a, 0) + sel(!c, b, 0)
    Op.IF_THEN_ELSE: _choice,                        # (same for the lazy choice)
    Op.CAST: _cast,                                  # float(a1 + a2) ~ float(a1) + float(a2)
}


def expand(e: Expr) -> Terms:
    """``e`` as ``sum(sign * term)``; subexpressions of other kinds are single terms."""
    if not dt.is_float(e.dtype):
        return [(1, e)]

    def visit(n: Expr, *args):
        rule = EXPAND_RULES.get(n.op) if dt.is_float(n.dtype) else None
        return rule(n, *args) if rule is not None else _atom(n)

    return fold(e, visit)


def group_terms(e: Expr, ctx=None) -> list[tuple[Expr, Expr]] | None:
    """``[(nonzeroness, sum of the terms with it)]`` when ``e`` has 2+ groups, else ``None``."""
    terms = expand(e)
    if len(terms) < 2:
        return None
    groups: dict[Expr, list[tuple[int, Expr]]] = {}
    for sign, t in terms:
        t = simplify_expr(t, ctx)
        nz = nonzero(t, ctx)
        if nz is FALSE:
            continue
        groups.setdefault(nz, []).append((sign, t))
    if len(groups) < 2:
        return None
    return [(nz, simplify_expr(signed_sum(ts), ctx)) for nz, ts in groups.items()]
