"""Scalar evaluation of expressions with the IR's exact semantics: constant folding.

``evaluate_scalar(e, env)`` computes ``e`` for given values of its variables, rounding ``float32`` results
to ``float32``, with floor division and modulo for integers.  The simplifier folds constant operators with
it and the tests check every rewrite rule with it; reads and reductions raise."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, const
from tensorad.ir.rewrite import MissingRuleError, fold


def _np(dtype: str):
    if dt.is_half(dtype):
        return dt.numpy_dtype(dtype).type  # np.float16 or ml_dtypes.bfloat16: rounds (RNE)
    return {"float32": np.float32, "float64": np.float64, "int32": np.int64, "int64": np.int64,
            "bool": bool}[dtype]


def _num(node: Expr, v: Any) -> Any:
    """Round a Python/NumPy result to the node's dtype."""
    if node.dtype == dt.BOOL:
        return bool(v)
    return int(v) if dt.is_int(node.dtype) else _np(node.dtype)(v)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _floordiv(node: Expr, a, b):  # floats: NumPy's, as ``ta.evaluate`` and kernels (fmod's exact remainder)
    return a // b if dt.is_int(node.dtype) else np.floor_divide(_np(node.dtype)(a), _np(node.dtype)(b))


def _mod(node: Expr, a, b):
    return a % b if dt.is_int(node.dtype) else np.mod(_np(node.dtype)(a), _np(node.dtype)(b))


def _cast(node: Expr, v):
    if dt.is_int(node.dtype) and isinstance(v, (float, np.floating)):
        v = dt.float_to_int(float(v), node.dtype)  # toward zero, saturated, NaN -> 0
    return _num(node, v)


def _data_index(info: Any, a: Any) -> int:
    """A gather index of a constant: clipped or wrapped; out of range under ``raise``, left for run time."""
    n, a = info.extent, int(a)
    if info.mode == "clip":
        return min(max(a, 0), n - 1)
    if info.mode == "wrap":
        return a % n
    if not 0 <= a < n:
        raise ValueError(f"gather index {a} out of range [0, {n})")
    return a


def _no_value(node: Expr, *args):
    raise ValueError(f"{node.op.name} has no scalar value")


def _num_rule(fn):
    """A rule whose result is rounded to the node's dtype."""
    return lambda node, *args: _num(node, fn(*args))


# One entry per ``Op`` (a test walks the enum); ``VAR`` is looked up in the environment.
CONST_RULES: dict[Op, Callable[..., Any]] = {
    Op.CONST: lambda node: _num(node, node.arg),
    Op.READ: _no_value,
    Op.REDUCE: _no_value,
    Op.DATA_INDEX: lambda node, a: _num(node, _data_index(node.arg, a)),  # np.take's modes
    Op.ADD: _num_rule(lambda a, b: a + b),
    Op.SUB: _num_rule(lambda a, b: a - b),
    Op.MUL: _num_rule(lambda a, b: a * b),
    Op.DIV: _num_rule(lambda a, b: a / b),
    Op.FLOORDIV: lambda node, a, b: _num(node, _floordiv(node, a, b)),  # floor(a / b)
    Op.MOD: lambda node, a, b: _num(node, _mod(node, a, b)),            # a - b * floor(a / b)
    Op.POW: _num_rule(np.power),
    Op.MAXIMUM: _num_rule(dt.maximum),                          # NaN propagates, -0 < +0
    Op.MINIMUM: _num_rule(dt.minimum),
    Op.NEG: _num_rule(lambda a: -a),
    Op.LT: lambda node, a, b: bool(a < b),
    Op.LE: lambda node, a, b: bool(a <= b),
    Op.GT: lambda node, a, b: bool(a > b),
    Op.GE: lambda node, a, b: bool(a >= b),
    Op.EQ: lambda node, a, b: bool(a == b),
    Op.NE: lambda node, a, b: bool(a != b),
    Op.AND: lambda node, a, b: bool(a and b),
    Op.OR: lambda node, a, b: bool(a or b),
    Op.NOT: lambda node, a: not a,
    Op.SELECT: lambda node, c, a, b: a if c else b,
    Op.IF_THEN_ELSE: lambda node, c, a, b: a if c else b,
    Op.CAST: _cast,
    Op.EXP: _num_rule(np.exp),
    Op.LOG: _num_rule(np.log),
    Op.SQRT: _num_rule(np.sqrt),
    Op.TANH: _num_rule(np.tanh),
    Op.SIGMOID: _num_rule(_sigmoid),
    Op.ABS: _num_rule(abs),
    Op.SIN: _num_rule(np.sin),
    Op.COS: _num_rule(np.cos),
    Op.ERF: _num_rule(math.erf),
}


def _visit(env: Mapping[Expr, Any]):
    def visit(node: Expr, *args: Any) -> Any:
        if node.op is Op.VAR:
            if node not in env:
                raise KeyError(f"no value for variable {node.name}")
            return _num(node, env[node])
        rule = CONST_RULES.get(node.op)
        if rule is None:
            raise MissingRuleError(f"constant folding: no rule for {node.op.name} ({node})")
        return rule(node, *args)
    return visit


def evaluate_scalar(e: Expr, env: Mapping[Expr, Any] | None = None) -> Any:
    """The value of ``e`` for variable values ``env`` (IR semantics, dtype-exact)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fold(e, _visit(env or {}))


# Functions that NumPy and the generated code (``codegen/llvm/vector_math.py``) round differently: folded
# only where every correct implementation gives the same bits (a max's tie count compares recomputations).
INEXACT = frozenset({Op.POW, Op.EXP, Op.LOG, Op.TANH, Op.SIGMOID, Op.SIN, Op.COS, Op.ERF})


def _exact_case(node: Expr) -> bool:
    """``node`` (an INEXACT op over constants) has an exact value: ``x ** 0``, ``1 ** y``, or
    ``exp``/``log``/``tanh``/``sigmoid``/``sin``/``cos``/``erf`` where it is 0, 1 or 1/2."""
    args = [float(s.arg) for s in node.src]
    if node.op is Op.POW:
        return args[1] == 0.0 or args[0] == 1.0
    return args[0] == (1.0 if node.op is Op.LOG else 0.0)


def fold_constant(node: Expr) -> Expr | None:
    """``node`` as a constant when all its operands are constants, else ``None``; integer division or
    modulo by zero and non-finite results are left unfolded."""
    if node.op in (Op.CONST, Op.VAR, Op.READ, Op.REDUCE) or not node.src:
        return None
    if any(s.op is not Op.CONST for s in node.src):
        return None
    if node.op in (Op.FLOORDIV, Op.MOD, Op.DIV) and node.src[1].arg == 0:
        return None
    if node.op in INEXACT and not _exact_case(node):
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
