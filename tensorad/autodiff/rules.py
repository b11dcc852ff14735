"""Derivative rules: one tangent rule per :class:`Op`, driven by :func:`tensorad.ir.rewrite.fold`.

A rule receives the node and its operands' tangents (an ``Expr`` or the symbolic :data:`ZERO`) and returns
the node's tangent.  Every derivative is built from this table, each mode giving the leaves (``VAR``,
``READ``) their tangents: ``jacobian`` gives a read of the input ``X[idx]`` the tangent
``select(jac_j == idx, 1, 0)``; reverse mode gives one read site 1 and every other 0; ``jvp`` gives a read
of a tensor with a tangent tensor ``dT`` the tangent ``dT[idx]``.  Integer and boolean nodes have the
tangent ``ZERO``, so rules see only floating-point nodes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, compare, const, unary
from ..ir.rewrite import MissingRuleError, fold
from . import combiners
from .zero import ZERO, Tangent, add, choose, div, mul, neg, sub, to_dtype


def _pow(n: Expr, da: Tangent, db: Tangent) -> Tangent:
    # d a^b = b a^(b-1) da + a^b log(a) db.  Where that is 0 * inf the values are PyTorch's (the limits
    # where the function is constant): the da term is 0 where b == 0, the db term 0 where a == 0 and
    # b >= 0 and where a == +inf and b < 0 (no test for a constant exponent or finite positive base).
    a, b = n.src
    zero = const(0, b.dtype)
    d_base: Tangent = ZERO
    if da is not ZERO:
        if b.op is Op.CONST:
            d_base = ZERO if b.arg == 0 else mul(da, b * a ** const(b.arg - 1, b.dtype))
        else:
            d_base = choose(Op.SELECT, compare(Op.EQ, b, zero), ZERO, mul(da, b * a ** (b - 1)), n.dtype)
    d_exp: Tangent = ZERO
    if db is not ZERO:
        d_exp = mul(db, n * unary(Op.LOG, a))
        if not (a.op is Op.CONST and 0 < a.arg < math.inf):
            constant = (compare(Op.EQ, a, zero) & compare(Op.GE, b, zero)) | (
                compare(Op.EQ, a, const(math.inf, a.dtype)) & compare(Op.LT, b, zero))
            d_exp = choose(Op.SELECT, constant, ZERO, d_exp, n.dtype)
    return add(d_base, d_exp)


def _cast(n: Expr, da: Tangent) -> Tangent:
    # float -> float passes the derivative on; to or from an integer is piecewise constant: 0.
    return to_dtype(da, n.dtype) if dt.is_float(n.src[0].dtype) else ZERO


def _abs(n: Expr, da: Tangent) -> Tangent:
    # d|a| = sign(a) da; at a == 0 the subgradient 0 (what central differences give).
    a = n.src[0]
    zero = const(0, a.dtype)
    return choose(Op.SELECT, compare(Op.GT, a, zero), da,
                  choose(Op.SELECT, compare(Op.LT, a, zero), neg(da), ZERO, n.dtype), n.dtype)


def _extremum(n: Expr, da: Tangent, db: Tangent) -> Tangent:
    # d max(a, b) = da where a > b, db where a < b, (da + db) / 2 at a tie, da + db unordered (PyTorch's).
    if not dt.is_float(n.dtype):
        return ZERO
    a, b = n.src
    win, lose = (Op.GT, Op.LT) if n.op is Op.MAXIMUM else (Op.LT, Op.GT)
    both = add(da, db)
    even = choose(Op.SELECT, compare(Op.EQ, a, b), mul(both, const(0.5, n.dtype)), both, n.dtype)
    tie = choose(Op.SELECT, compare(lose, a, b), db, even, n.dtype)
    return choose(Op.SELECT, compare(win, a, b), da, tie, n.dtype)


# Past this square, e^(-a^2) is below the dtype's smallest normal number: erf' is 0 there.
_ERF_NORMAL_SQUARE = {"float32": -math.log(2.0 ** -126), "float64": -math.log(2.0 ** -1022)}


def _erf(n: Expr, da: Tangent) -> Tangent:
    # d erf(a) = 2/sqrt(pi) e^(-a^2) da where e^(-a^2) is a normal number, else 0:
    # ``select(a^2 < L, 2/sqrt(pi) e^(-a^2), 0)``, L = -ln(smallest normal), so that no operation of the
    # derivative has a subnormal operand (a microcode assist on x86; PyTorch's GELU flushes them too).
    # The select also makes the second derivative 0 where the first is 0 (not inf * 0 at a = +-inf).  A
    # NaN square selects the exponential: NaN stays NaN.
    a = n.src[0]
    square = a * a
    limit = const(_ERF_NORMAL_SQUARE.get(dt.compute_dtype(a.dtype), _ERF_NORMAL_SQUARE["float32"]), a.dtype)
    value = unary(Op.EXP, -square) * const(2 / math.sqrt(math.pi), a.dtype)
    return mul(da, choose(Op.SELECT, compare(Op.GE, square, limit), ZERO, value, a.dtype))


def _mod(n: Expr, da: Tangent, db: Tangent) -> Tangent:
    # a % b = a - floor(a / b) * b  =>  d(a % b) = da - floor(a / b) db  (floats only)
    a, b = n.src
    return sub(da, mul(db, a // b))


def _zero(n: Expr, *d: Tangent) -> Tangent:
    return ZERO


def _reduce(n: Expr, dcond: Tangent, *dsrc: Tangent) -> Tangent:
    return combiners.reduce_tangent(n, dsrc, tangent)


def _reduce_mean_ties(n: Expr, dcond: Tangent, *dsrc: Tangent) -> Tangent:
    return combiners.reduce_tangent(n, dsrc, tangent, ties="mean")


def _select(n: Expr, dc: Tangent, da: Tangent, db: Tangent) -> Tangent:
    return choose(n.op, n.src[0], da, db, n.dtype)  # the condition is kept (lazy for if_then_else)


TANGENT_RULES: dict[Op, Callable[..., Tangent]] = {
    Op.VAR: _zero,                                              # index variables are constants
    Op.CONST: _zero,                                            # d c = 0
    Op.READ: _zero,                                             # other tensors: constants (modes override)
    Op.DATA_INDEX: _zero,                                       # an integer index: piecewise constant
    Op.ADD: lambda n, da, db: add(da, db),                      # d(a + b) = da + db
    Op.SUB: lambda n, da, db: sub(da, db),                      # d(a - b) = da - db
    Op.MUL: lambda n, da, db: add(mul(da, n.src[1]), mul(n.src[0], db)),    # d(ab) = da b + a db
    Op.DIV: lambda n, da, db: div(sub(da, mul(n, db)), n.src[1]),           # d(a/b) = (da - (a/b) db) / b
    Op.FLOORDIV: _zero,                                         # floor(a / b) is piecewise constant
    Op.MOD: _mod,                                               # d(a % b) = da - floor(a/b) db
    Op.NEG: lambda n, da: neg(da),                              # d(-a) = -da
    Op.POW: _pow,                                               # d a^b = b a^(b-1) da + a^b log(a) db
    Op.MAXIMUM: _extremum,                                      # d max(a, b): da, db; tie: half; NaN: both
    Op.MINIMUM: _extremum,                                      # d min(a, b): da, db; tie: half; NaN: both
    Op.LT: _zero, Op.LE: _zero, Op.GT: _zero,                   # comparisons are boolean: d = 0
    Op.GE: _zero, Op.EQ: _zero, Op.NE: _zero,
    Op.AND: _zero, Op.OR: _zero, Op.NOT: _zero,                 # logic is boolean: d = 0
    Op.SELECT: _select,                                         # d select(c, a, b) = select(c, da, db)
    Op.IF_THEN_ELSE: _select,                                   # d ite(c, a, b) = ite(c, da, db), lazy
    Op.CAST: _cast,                                             # float -> float: cast(da); ints: 0
    Op.EXP: lambda n, da: mul(da, n),                           # d e^a = e^a da
    Op.LOG: lambda n, da: div(da, n.src[0]),                    # d log a = da / a
    Op.SQRT: lambda n, da: div(da, n * 2),                      # d sqrt a = da / (2 sqrt a)
    Op.TANH: lambda n, da: mul(da, 1 - n * n),                  # d tanh a = (1 - tanh^2 a) da
    Op.SIGMOID: lambda n, da: mul(da, n * (1 - n)),             # d s(a) = s(a) (1 - s(a)) da
    Op.ABS: _abs,                                               # d|a| = sign(a) da, 0 at a = 0
    Op.SIN: lambda n, da: mul(da, unary(Op.COS, n.src[0])),     # d sin a = cos a da
    Op.COS: lambda n, da: neg(mul(da, unary(Op.SIN, n.src[0]))),  # d cos a = -sin a da
    Op.ERF: _erf,                                               # d erf a = 2/sqrt(pi) e^(-a^2) da
    Op.REDUCE: _reduce,                                         # sum: sum of d; others: (d, value) pairs
}


# forward mode's table: a ``max``/``min``'s tangent is its ties' mean (:func:`.combiners.reduce_tangent`)
FORWARD_RULES: dict[Op, Callable[..., Tangent]] = {**TANGENT_RULES, Op.REDUCE: _reduce_mean_ties}


def tangent(expr: Expr, leaf: Callable[[Expr], Tangent],
            rules: Mapping[Op, Callable[..., Tangent]] = TANGENT_RULES) -> Tangent:
    """The tangent of ``expr`` given the tangents of its leaves: ``leaf(node)`` gives every ``VAR`` and
    ``READ`` node's; integer and boolean nodes get ``ZERO`` without a rule."""

    def visit(node: Expr, *d: Tangent) -> Tangent:
        if not dt.is_float(node.dtype):
            return ZERO
        if node.op is Op.VAR or node.op is Op.READ:
            return leaf(node)
        try:
            rule = rules[node.op]
        except KeyError:
            raise MissingRuleError(f"no derivative rule for {node.op.name} nodes ({node})") from None
        return rule(node, *d)

    return fold(expr, visit)


def partial_by_read(expr: Expr, site: Expr) -> Tangent:
    """``d expr / d site`` for one read node ``site`` (other reads are held constant)."""
    one = const(1, site.dtype)
    return tangent(expr, lambda n: one if n is site else ZERO)
