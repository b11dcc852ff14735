"""Algebraic simplification: a table of rewrite rules keyed by ``Op``, run by ``ir.rewrite``.

Every rule is one line: a name, the math in a comment, a function ``(node, *operands) -> replacement |
None``.  All-constant nodes are folded first (:func:`.algebra.consts.fold_constant`).  Integer ``+ - *
neg`` are normalised as linear forms; integer comparisons are decided by ranges (:mod:`.algebra.ranges`),
else put in one canonical form.

NaN/inf policy: every rule is exact, at inf and NaN too.  ``0 * x``, ``x - x`` and the gate products
``select(c, x, 0) * y``, ``select(c, x, 0) / y``, ``T(c) * y`` are rewritten only where the other operand
*absorbs* the zero (:func:`absorbs`); ``0 / x`` never is.  The one licensed difference is
:mod:`.zeros.nonzero`'s lifting.  Constant folding never folds a non-finite float or an integer division
by zero.  Every ``Op`` has an entry in :data:`ALGEBRA_RULES` (ops without rules an empty tuple)."""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Callable

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, TRUE, Expr, Op, const
from tensorad.ir.rewrite import MissingRuleError, rewrite, walk

from .consts import fold_constant
from .index import (
    IndexMemo,
    canonical_compare,
    data_address,
    floordiv_rule,
    minmax_rule,
    mod_rule,
    negate,
    normalise_linear,
    zero_like,
)
from .logic import conjuncts, disjuncts, has

Rule = tuple[str, Callable[..., "Expr | None"]]


def is_const(e: Expr, v: float | None = None) -> bool:
    return e.op is Op.CONST and e.dtype != dt.BOOL and (v is None or e.arg == v)


def is_zero(e: Expr) -> bool:
    return is_const(e, 0)


def absorbs(e: Expr, divisor: bool = False) -> bool:
    """``0 * e`` (``0 / e`` for a ``divisor``) is exactly 0, up to the zero's sign: ``e`` is finite
    wherever computed (an integer, a float cast of one, a finite constant); a divisor: a nonzero constant."""
    if e.op is Op.CONST:
        return e.dtype != dt.BOOL and math.isfinite(e.arg) and not (divisor and e.arg == 0)
    if divisor or e.dtype == dt.BOOL:
        return False
    return not dt.is_float(e.dtype) or (e.op is Op.CAST and e.dtype in ("float32", "float64")
                                        and not dt.is_float(e.src[0].dtype))


def gated(e: Expr) -> tuple[Expr, Expr] | None:
    """``(c, x)`` when ``e`` is ``select(c, x, 0)`` or ``if_then_else(c, x, 0)``."""
    return (e.src[0], e.src[1]) if e.op in (Op.SELECT, Op.IF_THEN_ELSE) and is_zero(e.src[2]) else None


def rebuild_gate(e: Expr, x: Expr) -> Expr:
    """The gate of ``e`` (a select or if_then_else with 0 else-branch) around ``x``."""
    return Expr(e.op, x.dtype, (e.src[0], x, zero_like(x)))


def _neg(x: Expr) -> Expr:
    return Expr(Op.NEG, x.dtype, (x,))


def _bin(op: Op, a: Expr, b: Expr) -> Expr:
    return Expr(op, a.dtype, (a, b))


def _cast_gate(n: Expr, a: Expr) -> Expr | None:
    if a.op in (Op.SELECT, Op.IF_THEN_ELSE) and (a.src[1].op is Op.CONST or a.src[2].op is Op.CONST) \
            and a.dtype != dt.BOOL:
        return Expr(a.op, n.dtype, (a.src[0], Expr(Op.CAST, n.dtype, (a.src[1],)),
                                    Expr(Op.CAST, n.dtype, (a.src[2],))))
    return None


def _half_round_trip(n: Expr, a: Expr) -> Expr | None:
    """``bfloat16(float32(h)) = h`` for any half value ``h`` (a rounding cast or a read of a half tensor)."""
    if dt.is_half(n.dtype) and a.op is Op.CAST and a.dtype == "float32" and a.src[0].dtype == n.dtype:
        return a.src[0]
    return None


def _merge_gates(n: Expr, c: Expr, x: Expr, y: Expr) -> Expr | None:
    """``select(c, select(d, x, 0), 0) -> select(c && d, x, 0)`` (when safe for the op kinds)."""
    if not is_zero(y):
        return None
    g = gated(x)
    if g is None:
        return None
    d, inner = g
    if n.op is Op.SELECT and x.op is Op.SELECT:
        return Expr(Op.SELECT, n.dtype, (Expr(Op.AND, dt.BOOL, (c, d)), inner, y))
    if n.op is Op.IF_THEN_ELSE and not any(m.op in (Op.READ, Op.REDUCE) for m in walk(d)):  # d runs anywhere
        return Expr(Op.IF_THEN_ELSE, n.dtype, (Expr(Op.AND, dt.BOOL, (c, d)), inner, y))
    return None


def _same_gate(x: Expr, y: Expr) -> bool:
    gx, gy = gated(x), gated(y)
    return gx is not None and gy is not None and x.op is y.op and gx[0] is gy[0]


CHOICE_RULES: tuple[Rule, ...] = (
    ("choice-true", lambda n, c, a, b: a if c is TRUE else None),                # select(T, a, b) = a
    ("choice-false", lambda n, c, a, b: b if c is FALSE else None),              # select(F, a, b) = b
    ("choice-same", lambda n, c, a, b: a if a is b else None),                   # select(c, a, a) = a
    ("choice-not", lambda n, c, a, b: Expr(n.op, n.dtype, (c.src[0], b, a))      # select(!c, a, b)
     if c.op is Op.NOT else None),                                               #   = select(c, b, a)
    ("choice-zero-then", lambda n, c, a, b, memo=None:                            # select(c, 0, x)
     Expr(n.op, n.dtype, (negate(c, memo), b, a))                                 #   = select(!c, x, 0)
     if is_zero(a) and not is_zero(b) and negate(c, memo) is not None
     and negate(c, memo).op is not Op.NOT else None),
    ("choice-nest-then", lambda n, c, a, b: Expr(n.op, n.dtype, (c, a.src[1], b))  # select(c, select(c,
     if a.op is n.op and a.src[0] is c else None),                               #   x, y), z) = sel(c,x,z)
    ("choice-nest-else", lambda n, c, a, b: Expr(n.op, n.dtype, (c, a, b.src[2]))  # select(c, x, select(c,
     if b.op is n.op and b.src[0] is c else None),                               #   y, z)) = sel(c, x, z)
    ("choice-merge", _merge_gates),                                 # sel(c, sel(d, x, 0), 0) = sel(c&d, x, 0)
    ("choice-bool", lambda n, c, a, b: c if a is TRUE and b is FALSE else None),  # select(c, T, F) = c
)

ALGEBRA_RULES: dict[Op, tuple[Rule, ...]] = {
    Op.ADD: (
        ("int-linear", lambda n, a, b, memo=None: normalise_linear(n, memo)),  # sum of c_k*atom_k + c0
        ("add-zero-r", lambda n, a, b: a if is_zero(b) else None),      # x + 0 = x
        ("add-zero-l", lambda n, a, b: b if is_zero(a) else None),      # 0 + x = x
        ("add-neg-r", lambda n, a, b: _bin(Op.SUB, a, b.src[0]) if b.op is Op.NEG else None),  # x+(-y)=x-y
        ("add-neg-l", lambda n, a, b: _bin(Op.SUB, b, a.src[0]) if a.op is Op.NEG else None),  # (-x)+y=y-x
        ("add-gate", lambda n, a, b: rebuild_gate(a, _bin(Op.ADD, a.src[1], b.src[1]))  # sel(c,x,0)+
         if _same_gate(a, b) else None),                                 #   sel(c,y,0) = sel(c, x+y, 0)
    ),
    Op.SUB: (
        ("int-linear", lambda n, a, b, memo=None: normalise_linear(n, memo)),  # sum of c_k*atom_k + c0
        ("sub-zero-r", lambda n, a, b: a if is_zero(b) else None),      # x - 0 = x
        ("sub-zero-l", lambda n, a, b: _neg(b) if is_zero(a) else None),  # 0 - x = -x
        ("sub-self", lambda n, a, b: zero_like(n) if a is b and absorbs(a) else None),  # x - x = 0 (x finite)
        ("sub-neg", lambda n, a, b: _bin(Op.ADD, a, b.src[0]) if b.op is Op.NEG else None),  # x-(-y)=x+y
        ("sub-gate", lambda n, a, b: rebuild_gate(a, _bin(Op.SUB, a.src[1], b.src[1]))  # sel(c,x,0)-
         if _same_gate(a, b) else None),                                 #   sel(c,y,0) = sel(c, x-y, 0)
    ),
    Op.MUL: (
        ("int-linear", lambda n, a, b, memo=None: normalise_linear(n, memo)),  # c * (sum) distributes
        ("mul-one-r", lambda n, a, b: a if is_const(b, 1) else None),   # x * 1 = x
        ("mul-one-l", lambda n, a, b: b if is_const(a, 1) else None),   # 1 * x = x
        ("mul-zero-r", lambda n, a, b: b if is_zero(b) and absorbs(a) else None),  # x * 0 = 0 (x absorbs)
        ("mul-zero-l", lambda n, a, b: a if is_zero(a) and absorbs(b) else None),  # 0 * x = 0 (x absorbs)
        ("mul-minus-one-r", lambda n, a, b: _neg(a) if is_const(b, -1) else None),  # x * -1 = -x
        ("mul-minus-one-l", lambda n, a, b: _neg(b) if is_const(a, -1) else None),  # -1 * x = -x
        ("mul-gate-l", lambda n, a, b: rebuild_gate(a, _bin(Op.MUL, a.src[1], b))  # sel(c,x,0)*y
         if gated(a) and absorbs(b) else None),                          #   = sel(c, x*y, 0)
        ("mul-gate-r", lambda n, a, b: rebuild_gate(b, _bin(Op.MUL, a, b.src[1]))  # y*sel(c,x,0)
         if gated(b) and absorbs(a) else None),                          #   = sel(c, y*x, 0)
        ("mul-bool-l", lambda n, a, b: Expr(Op.SELECT, n.dtype, (a.src[0], b, zero_like(b)))  # T(c)*y
         if a.op is Op.CAST and a.src[0].dtype == dt.BOOL and absorbs(b) else None),  # = sel(c, y, 0)
        ("mul-bool-r", lambda n, a, b: Expr(Op.SELECT, n.dtype, (b.src[0], a, zero_like(a)))  # y*T(c)
         if b.op is Op.CAST and b.src[0].dtype == dt.BOOL and absorbs(a) else None),  # = sel(c, y, 0)
    ),
    Op.DIV: (
        ("div-one", lambda n, a, b: a if is_const(b, 1) else None),     # x / 1 = x
        ("div-gate", lambda n, a, b: rebuild_gate(a, _bin(Op.DIV, a.src[1], b))  # sel(c,x,0)/y
         if gated(a) and absorbs(b, True) else None),                    #   = sel(c, x/y, 0)
    ),
    Op.FLOORDIV: (("floordiv", floordiv_rule),),                        # (c*Q + R)//c = Q + R//c
    Op.MOD: (("mod", mod_rule),),                                       # (c*Q + R) % c = R % c
    Op.NEG: (
        ("int-linear", lambda n, a, memo=None: normalise_linear(n, memo)),  # -(sum) distributes
        ("neg-neg", lambda n, a: a.src[0] if a.op is Op.NEG else None),  # -(-x) = x
        ("neg-sub", lambda n, a: _bin(Op.SUB, a.src[1], a.src[0]) if a.op is Op.SUB else None),  # -(x-y)=y-x
        ("neg-gate", lambda n, a: rebuild_gate(a, _neg(a.src[1])) if gated(a) else None),  # -sel(c,x,0)
    ),                                                                   #   = sel(c, -x, 0)
    Op.POW: (
        ("pow-one", lambda n, a, b: a if is_const(b, 1) else None),     # x ** 1 = x
        ("pow-zero", lambda n, a, b: const(1, n.dtype) if is_zero(b) else None),  # x ** 0 = 1
    ),
    Op.MAXIMUM: (
        ("max-same", lambda n, a, b: a if a is b else None),            # max(x, x) = x
        ("max-ranges", minmax_rule),                                   # max(a, b) = a if a >= b always
    ),
    Op.MINIMUM: (
        ("min-same", lambda n, a, b: a if a is b else None),            # min(x, x) = x
        ("min-ranges", minmax_rule),                                   # min(a, b) = a if a <= b always
    ),
    Op.AND: (
        ("and-true-r", lambda n, a, b: a if b is TRUE else None),       # a && T = a
        ("and-true-l", lambda n, a, b: b if a is TRUE else None),       # T && b = b
        ("and-false", lambda n, a, b: FALSE if FALSE is a or FALSE is b else None),  # a && F = F
        ("and-dup", lambda n, a, b: a if has(conjuncts(a), b) else None),  # (a && b) && b = a && b
        ("and-contra", lambda n, a, b, memo=None: FALSE if negate(b, memo) is not None  # a && !a = F
         and has(conjuncts(a), negate(b, memo)) else None),
    ),
    Op.OR: (
        ("or-false-r", lambda n, a, b: a if b is FALSE else None),      # a || F = a
        ("or-false-l", lambda n, a, b: b if a is FALSE else None),      # F || b = b
        ("or-true", lambda n, a, b: TRUE if TRUE is a or TRUE is b else None),  # a || T = T
        ("or-dup", lambda n, a, b: a if has(disjuncts(a), b) else None),  # (a || b) || b = a || b
        ("or-excluded", lambda n, a, b, memo=None: TRUE if negate(b, memo) is not None  # a || !a = T
         and has(disjuncts(a), negate(b, memo)) else None),
    ),
    Op.NOT: (("not-push", lambda n, a, memo=None: negate(a, memo)),),  # !(a < b) = a >= b, !!a = a
    Op.SELECT: CHOICE_RULES,
    Op.IF_THEN_ELSE: CHOICE_RULES,
    Op.CAST: (("cast-choice", _cast_gate),                              # T(sel(c, 1, 0)) = sel(c, T(1), T(0))
              ("half-round-trip", _half_round_trip)),                   # h(f32(h(x))) = h(x): exact
    Op.REDUCE: (
        ("reduce-empty", lambda n, c, *s: n.arg.combiner.identity[n.arg.value_index]  # where False:
         if c is FALSE else None),                                       #   identity
        ("sum-zero", lambda n, c, *s: zero_like(n) if n.arg.combiner.kind == "sum"  # sum(0) = 0
         and all(is_zero(x) for x in s) else None),
    ),
}
for _op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE):
    ALGEBRA_RULES[_op] = (("int-compare",  # decide or normalise
                           lambda n, a, b, memo=None: canonical_compare(n, memo)),)
ALGEBRA_RULES[Op.EQ] += (("eq-data-address", lambda n, a, b: data_address(n)),)  # D == v: D an address
for _op in (Op.VAR, Op.CONST, Op.READ, Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.SIGMOID, Op.ABS,
            Op.SIN, Op.COS, Op.ERF):
    ALGEBRA_RULES[_op] = ()  # constant folding only
ALGEBRA_RULES[Op.DATA_INDEX] = (  # take(v, 1, clip) = take(v, 1, wrap) = 0: one point in range
    ("index-one-point", lambda n, a: const(0, n.dtype) if isinstance(n.arg.extent, int) and n.arg.extent == 1
     and n.arg.mode != "raise" else None),)


_LINEAR_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.NEG})
# which rules read per-node index analyses (a ``memo`` keyword: the call's IndexMemo)
_TAKES_MEMO: dict[Op, tuple[bool, ...]] = {
    op: tuple("memo" in inspect.signature(fn).parameters for _, fn in rules)
    for op, rules in ALGEBRA_RULES.items()}


def _applier(trace: Counter | None, memo: IndexMemo) -> Callable[[Expr], Expr | None]:
    def apply(node: Expr) -> Expr | None:
        try:
            rules = ALGEBRA_RULES[node.op]
        except KeyError:
            raise MissingRuleError(f"simplify: no rule entry for {node.op.name} ({node})") from None
        folded = fold_constant(node)
        if folded is not None:
            if trace is not None:
                trace["const-fold"] += 1
            return folded
        int_linear = node.op in _LINEAR_OPS and dt.is_int(node.dtype)
        for (name, fn), takes_memo in zip(rules, _TAKES_MEMO[node.op]):
            if int_linear and not (name == "int-linear" or "gate" in name):
                continue  # integer + - * neg: the linear form is the one canonical form
            out = fn(node, *node.src, memo=memo) if takes_memo else fn(node, *node.src)
            if out is not None and out is not node:
                if trace is not None:
                    trace[name] += 1
                return out
        return None
    return apply


def simplify_expr(e: Expr, ctx=None) -> Expr:
    """``e`` rewritten with :data:`ALGEBRA_RULES` to a fixed point.  ``ctx`` (an optimizer call's
    :class:`.context.OptimizerContext`) keeps the memos and may record the rules that fire (``ctx.trace``)."""
    if ctx is None:
        return rewrite(e, _applier(None, IndexMemo()), {})
    return rewrite(e, _applier(ctx.trace, ctx.index), ctx.simplified)
