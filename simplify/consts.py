"""Scalar evaluation of expressions with the IR's exact semantics: constant folding.

``evaluate_scalar(e, env)`` computes ``e`` for given values of its variables, rounding
``float32`` results to ``float32`` (NumPy scalars), with floor division and modulo for
integers.  The algebraic simplifier folds an operator whose operands are all constants with
it; the tests check every rewrite rule by evaluating both sides at random points with it.
Reads and reductions have no scalar value here (they raise).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, const
from tensorad.ir.rewrite import fold


def _np(dtype: str):
    return {"float32": np.float32, "float64": np.float64, "int32": np.int64, "int64": np.int64,
            "bool": bool}[dtype]


def _num(node: Expr, v: Any) -> Any:
    """Round a Python/NumPy result to the node's dtype."""
    if node.dtype == dt.BOOL:
        return bool(v)
    if dt.is_int(node.dtype):
        return int(v)
    return _np(node.dtype)(v)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _pow(a, b):
    return np.power(a, b)


_UNARY = {Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt, Op.TANH: np.tanh,
          Op.SIGMOID: _sigmoid, Op.ABS: abs, Op.SIN: np.sin, Op.COS: np.cos,
          Op.ERF: math.erf}


def _binary(node: Expr, a, b):
    op = node.op
    if op is Op.ADD:
        return a + b
    if op is Op.SUB:
        return a - b
    if op is Op.MUL:
        return a * b
    if op is Op.DIV:
        return a / b
    if op is Op.FLOORDIV:
        return a // b if dt.is_int(node.dtype) else np.floor(a / b)
    if op is Op.MOD:
        return a % b if dt.is_int(node.dtype) else a - b * np.floor(a / b)
    if op is Op.POW:
        return _pow(a, b)
    if op is Op.MAXIMUM:
        return max(a, b)
    return min(a, b)


_CMP = {Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
        Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b}


def _visit(env: Mapping[Expr, Any]):
    def visit(node: Expr, *args: Any) -> Any:
        op = node.op
        if op is Op.CONST:
            return _num(node, node.arg)
        if op is Op.VAR:
            if node not in env:
                raise KeyError(f"no value for variable {node.name}")
            return _num(node, env[node])
        if op in (Op.READ, Op.REDUCE):
            raise ValueError(f"{op.name} has no scalar value")
        if op in _CMP:
            return bool(_CMP[op](*args))
        if op is Op.AND:
            return bool(args[0] and args[1])
        if op is Op.OR:
            return bool(args[0] or args[1])
        if op is Op.NOT:
            return not args[0]
        if op in (Op.SELECT, Op.IF_THEN_ELSE):
            return args[1] if args[0] else args[2]
        if op is Op.CAST:
            v = args[0]
            if dt.is_int(node.dtype) and isinstance(v, (float, np.floating)):
                v = math.trunc(float(v))
            return _num(node, v)
        if op is Op.NEG:
            return _num(node, -args[0])
        if op in _UNARY:
            return _num(node, _UNARY[op](args[0]))
        return _num(node, _binary(node, *args))
    return visit


def evaluate_scalar(e: Expr, env: Mapping[Expr, Any] | None = None) -> Any:
    """The value of ``e`` for variable values ``env`` (IR semantics, dtype-exact)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fold(e, _visit(env or {}))


def fold_constant(node: Expr) -> Expr | None:
    """``node`` as a constant when all its operands are constants, else ``None``.

    Integer division or modulo by zero and results that are not finite are left unfolded
    (the run-time behaviour is the code generator's to define).
    """
    if node.op in (Op.CONST, Op.VAR, Op.READ, Op.REDUCE) or not node.src:
        return None
    if any(s.op is not Op.CONST for s in node.src):
        return None
    if node.op in (Op.FLOORDIV, Op.MOD, Op.DIV) and node.src[1].arg == 0:
        return None
    try:
        v = evaluate_scalar(node)
    except (OverflowError, ValueError, ZeroDivisionError):
        return None
    if dt.is_float(node.dtype) and not math.isfinite(float(v)):
        return None
    if dt.is_int(node.dtype):
        lo, hi = dt.min_value(node.dtype), dt.max_value(node.dtype)
        if not lo <= v <= hi:
            return None
    return const(v.item() if hasattr(v, "item") else v, node.dtype)
