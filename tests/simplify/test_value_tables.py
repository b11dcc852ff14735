"""The nonzeroness rules and constant folding, checked at random points against NumPy.

Both tables are walked against ``Op`` and exercised by hypothesis-drawn expressions over
integer indices and float64 data where exact zeros, negative values and zero exponents are
common.  The oracle is an interpreter written here with NumPy (:func:`_value`), not
tensorad's:

* ``nonzero(e)`` must be false only where ``e`` is zero.  "Zero" is the symbolic-zero policy
  of ``simplify/algebra/rules.py``: ``0 * x`` and ``0 / x`` are 0 even where ``x`` is inf or NaN, so
  the oracle multiplies with a strong zero; everything else (``0 ** 0 = 1``, ``0 ** -1 =
  inf``, ``log(0) = -inf``) keeps its IEEE value.  ``select(k == i, x, 0) ** w``
  with ``w = 0`` is such a point.
* ``evaluate_scalar(e)`` (constant folding) must equal the oracle exactly.

A coverage trace (each rule wrapped in a counter) fails when a rule never ran.
"""

from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify.algebra import consts
from tensorad.simplify.algebra.consts import CONST_RULES, evaluate_scalar
from tensorad.simplify.zeros.nonzero import NZ_RULES, nonzero

import tensorad as ta
from tensorad.ir import Expr, Op, var
from tensorad.ir.expr import const, data_index
from tensorad.ir.rewrite import MissingRuleError

F = "float64"
IV, JV = var("i", 0, 6), var("j", -3, 3)
X, Y, W = var("x", dtype=F), var("y", dtype=F), var("w", dtype=F)
P = ta.placeholder((8,), F, name="P")
_k = ta.reduce_axis((0, 4), "k")
G = ta.compute((8,), lambda a: ta.if_then_else(a % 2 == 0, P[a] * 2.0, 0.0), name="G")  # guard a%2==0
S = ta.compute((8,), lambda a: ta.sum(P[_k] * P[a], axis=_k, where=(a > 2) & (_k < 3)), name="S")
SETTINGS = dict(deadline=None, derandomize=True, max_examples=examples(150),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
DATA = st.sampled_from([0.0, 0.0, -0.0, 1.0, -1.0, 2.0, -2.5, 0.5, 3.0])


def c(v) -> Expr:
    return const(v, F)


# ---- the oracle --------------------------------------------------------------------------

def _mul(a, b, strong):
    if strong and (a == 0 or b == 0):
        return 0.0
    return a * b


def _div(a, b, strong):
    if strong and a == 0:
        return 0.0
    with np.errstate(all="ignore"):
        return np.float64(a) / np.float64(b)


def _floor_div(a, b, is_int):
    if is_int:
        return a // b
    with np.errstate(all="ignore"):
        return np.floor(np.float64(a) / b)


def _mod(a, b, is_int):
    if is_int:
        return a % b
    with np.errstate(all="ignore"):
        return a - b * np.floor(np.float64(a) / b)


def _unary(fn):
    def run(a):
        with np.errstate(all="ignore"):
            return float(fn(np.float64(a)))
    return run


_ORACLE_UNARY = {Op.EXP: _unary(np.exp), Op.LOG: _unary(np.log), Op.SQRT: _unary(np.sqrt),
                 Op.TANH: _unary(np.tanh), Op.SIGMOID: _unary(lambda a: 1.0 / (1.0 + np.exp(-a))),
                 Op.ABS: abs, Op.SIN: _unary(np.sin), Op.COS: _unary(np.cos), Op.NEG: lambda a: -a,
                 Op.ERF: lambda a: math.erf(a) if not math.isnan(a) else math.nan}
_ORACLE_CMP = {Op.LT: np.less, Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal,
               Op.EQ: np.equal, Op.NE: np.not_equal}
_TENSORS: dict = {}


def _tensor_values(t, p):
    """``G`` and ``S`` from their definitions, in NumPy."""
    a = np.arange(8)
    if t.op is G.op:
        return np.where(a % 2 == 0, p * 2.0, 0.0)
    return np.where(a > 2, p[:3].sum() * p, 0.0)


def _value(e: Expr, env: dict, strong: bool):
    """``e`` at ``env`` (variables and ``P``), strong zeros in products when ``strong``."""
    op = e.op
    if op is Op.VAR:
        return env[e]
    if op is Op.CONST:
        return e.arg
    if op in (Op.SELECT, Op.IF_THEN_ELSE):
        cond = _value(e.src[0], env, strong)
        if op is Op.SELECT:
            a, b = _value(e.src[1], env, strong), _value(e.src[2], env, strong)
            return a if cond else b
        return _value(e.src[1] if cond else e.src[2], env, strong)
    if op is Op.READ:
        idx = int(_value(e.src[0], env, strong))
        return float(_tensor_values(e.arg, env[P])[idx])
    if op is Op.REDUCE:
        raise AssertionError("reductions are checked through reads")
    args = [_value(s, env, strong) for s in e.src]
    is_int = e.dtype.startswith("int")
    if op is Op.ADD:
        return args[0] + args[1]
    if op is Op.SUB:
        return args[0] - args[1]
    if op is Op.MUL:
        return _mul(*args, strong)
    if op is Op.DIV:
        return float(_div(*args, strong))
    if op is Op.FLOORDIV:
        return _floor_div(*args, is_int)
    if op is Op.MOD:
        return _mod(*args, is_int)
    if op is Op.POW:
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(args[0]), np.float64(args[1])))
    if op is Op.MAXIMUM:
        return float(np.maximum(*args)) if not is_int else max(args)
    if op is Op.MINIMUM:
        return float(np.minimum(*args)) if not is_int else min(args)
    if op in _ORACLE_CMP:
        return bool(_ORACLE_CMP[op](*args))
    if op is Op.AND:
        return bool(args[0]) and bool(args[1])
    if op is Op.OR:
        return bool(args[0]) or bool(args[1])
    if op is Op.NOT:
        return not args[0]
    if op is Op.DATA_INDEX:  # np.take's modes (raise: the value itself, in range here)
        n, mode = e.arg.extent, e.arg.mode
        return min(max(args[0], 0), n - 1) if mode == "clip" else args[0] % n if mode == "wrap" else args[0]
    if op is Op.CAST:
        if e.dtype == "bool":
            return bool(args[0] != 0)
        if is_int:
            return int(math.trunc(args[0]))
        return float(args[0])
    return _ORACLE_UNARY[op](args[0])


# ---- random expressions ------------------------------------------------------------------

def _ints():
    leaf = st.sampled_from([IV, JV, const(2), const(-1), const(0)])

    def grow(sub):
        div = st.sampled_from([1, 2, 3])
        return st.one_of(
            st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
            st.tuples(sub, sub).map(lambda t: t[0] - t[1]),
            st.tuples(sub, div).map(lambda t: t[0] // t[1]),
            st.tuples(sub, div).map(lambda t: t[0] % t[1]),
            st.tuples(sub, sub).map(lambda t: ta.maximum(t[0], t[1])),
        )
    return st.recursive(leaf, grow, max_leaves=4)


def _conds(ints):
    cmp = st.tuples(st.sampled_from([Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE]), ints, ints).map(
        lambda t: Expr(t[0], "bool", (t[1], t[2])))

    def grow(sub):
        return st.one_of(st.tuples(sub, sub).map(lambda t: t[0] & t[1]),
                         st.tuples(sub, sub).map(lambda t: t[0] | t[1]),
                         sub.map(lambda a: ~a))
    return st.recursive(cmp, grow, max_leaves=3)


def _floats(reads: bool = True):
    ints = _ints()
    conds = _conds(ints)
    leaf = st.one_of(
        st.sampled_from([X, Y, W, c(0.0), c(1.0), c(-2.0), c(0.5)]),
        ints.map(lambda e: ta.cast(F, e)),                  # index values (exact zeros)
        conds.map(lambda e: ta.cast(F, e)),                 # conditions as 0 / 1
    )
    if reads:
        leaf = st.one_of(leaf, st.sampled_from([G[IV], S[IV], G[IV + 2], S[(IV + JV) % 8]]))  # guarded

    def grow(sub):
        binary = st.sampled_from([Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM,
                                  Op.FLOORDIV, Op.MOD])
        unary = st.sampled_from([Op.NEG, Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.SIGMOID, Op.ABS,
                                 Op.SIN, Op.COS, Op.ERF])
        return st.one_of(
            st.tuples(binary, sub, sub).map(lambda t: Expr(t[0], F, (t[1], t[2]))),
            st.tuples(unary, sub).map(lambda t: Expr(t[0], F, (t[1],))),
            st.tuples(st.sampled_from([Op.SELECT, Op.IF_THEN_ELSE]), conds, sub, sub).map(
                lambda t: Expr(t[0], F, (t[1], t[2], t[3]))),
            st.tuples(st.sampled_from([Op.SELECT, Op.IF_THEN_ELSE]), conds, sub).map(  # gated
                lambda t: Expr(t[0], F, (t[1], t[2], c(0.0)))),
            st.tuples(conds, sub, sub).map(  # select inside pow: a zero base
                lambda t: ta.power(ta.select(t[0], t[1], c(0.0)), t[2])),
        )
    return st.recursive(leaf, grow, max_leaves=6)


# every op once over data with zeros, negatives and zero exponents (random draws add the rest)
EVERY_OP = [Expr(op, F, (X, Y)) for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM,
                                           Op.MINIMUM, Op.FLOORDIV, Op.MOD)] + \
    [Expr(op, F, (ta.select(IV < 3, X, c(0.0)),)) for op in _ORACLE_UNARY] + \
    [ta.power(ta.select(IV < 3, X, c(0.0)), W), ta.if_then_else(IV % 2 == 0, X, c(0.0)),
     ta.cast(F, (IV // 2) % 3 - JV), ta.cast(F, ~(IV < JV) | (JV >= 1) & (IV != 2)),
     ta.cast(F, ta.cast("int32", Y)), ta.cast(F, IV == JV) * X,
     # gather indices: j in [-3, 3) clipped or wrapped into [0, 4); i in [0, 6) checked
     ta.cast(F, data_index(JV, 4, "clip")) * X, ta.cast(F, data_index(JV + IV, 4, "wrap")),
     ta.cast(F, data_index(IV, 6, "raise")) - Y]
GRID = [{IV: i, JV: j, X: x, Y: y, W: w, P: np.arange(8.0) - 3}
        for i, j in ((0, 0), (4, -3)) for x in (0.0, -2.5, 0.5) for y in (0.0, 3.0, -1.0)
        for w in (0.0, 2.0)]
ENVS = st.fixed_dictionaries({IV: st.integers(0, 5), JV: st.integers(-3, 2), X: DATA, Y: DATA, W: DATA,
                              P: st.lists(DATA, min_size=8, max_size=8).map(np.array)})


@contextmanager
def traced(table: dict, trace: Counter):
    """Every rule of ``table`` wrapped in a counter of the ops it ran for."""
    saved = dict(table)

    def wrap(op, fn):
        def run(*args, **kw):
            trace[op] += 1
            return fn(*args, **kw)
        return run

    for op, fn in saved.items():
        table[op] = wrap(op, fn)
    try:
        yield trace
    finally:
        table.update(saved)


# ---- nonzeroness -------------------------------------------------------------------------

def test_every_op_has_a_nonzeroness_rule_and_a_folding_rule():
    assert [op for op in Op if op not in NZ_RULES] == []
    assert [op for op in Op if op not in CONST_RULES and op is not Op.VAR] == []


def _nonzero_is_sound(e: Expr, env: dict) -> None:
    nz = nonzero(e)
    if _value(nz, env, strong=True):
        return
    v = _value(e, env, strong=True)
    assert v == 0, f"nz({e}) = {nz} is false at {env} but the value is {v}"


def test_nonzeroness_is_sound_at_random_points_and_every_rule_runs():
    trace: Counter = Counter()

    @settings(**SETTINGS)
    @given(_floats(), ENVS)
    def check(e, env):
        _nonzero_is_sound(e, env)

    with traced(NZ_RULES, trace):
        for e in EVERY_OP:
            for env in GRID:
                _nonzero_is_sound(e, env)
        check()
        # a reduction and a bare condition are their own cases (nz = True, nz(c) = c)
        _nonzero_is_sound(S.op.body[0].src[1], {P: np.ones(8), IV: 0, JV: 0, X: 0.0, Y: 0.0, W: 0.0,
                                                S.op.axes[0]: 4, _k: 1})
        assert nonzero(S.op.body[0]) is ta.const(True)
        assert nonzero(IV < JV) is nonzero(IV < JV)
    missing = [op for op in Op if trace[op] == 0]
    assert missing == [], f"nonzeroness rules never exercised: {missing}"


@pytest.mark.parametrize("w", [0.0, -1.0, 2.0])
def test_pow_of_a_selected_base_with_a_data_exponent(w):
    """``Y[i] = sum_k select(k == i, x[k], 0) ** w[k]``; with ``w = 0`` every term is 1."""
    x = ta.placeholder((5,), F, name="x")
    wt = ta.placeholder((5,), F, name="wt")
    k = ta.reduce_axis((0, 5), "k")
    Yt = ta.compute((5,), lambda i: ta.sum(ta.power(ta.select(k == i, x[k], 0.0), wt[k]), axis=k), name="Y")
    Yo = ta.OptimizeAndLiftNonzeronessConditions(Yt)
    xv, wv = np.arange(1.0, 6.0), np.full(5, w)
    with np.errstate(all="ignore"):
        terms = np.where(np.eye(5, dtype=bool), xv[None, :], 0.0) ** wv[None, :]
    want = terms.sum(axis=1)
    np.testing.assert_allclose(ta.evaluate([Yo], {x: xv, wt: wv})[0], want)
    np.testing.assert_allclose(ta.evaluate([Yt], {x: xv, wt: wv})[0], want)


# ---- constant folding --------------------------------------------------------------------

def test_constant_folding_equals_numpy_at_random_points_and_every_rule_runs():
    trace: Counter = Counter()

    def same(e, env):
        want = _value(e, env, strong=False)
        got = evaluate_scalar(e, env)
        assert (math.isnan(want) and math.isnan(got)) or got == want, f"{e} at {env}: {got} != {want}"

    @settings(**SETTINGS)
    @given(_floats(reads=False), ENVS)
    def check(e, env):
        same(e, env)

    with traced(CONST_RULES, trace):
        for e in EVERY_OP:
            for env in GRID:
                same(e, env)
        with pytest.raises(ValueError, match="READ has no scalar value"):
            evaluate_scalar(G[IV], {IV: 0})
        check()
        with pytest.raises(ValueError, match="REDUCE has no scalar value"):  # reductions are loops
            evaluate_scalar(ta.sum(ta.cast(F, _k), axis=_k), {_k: 0})
    missing = [op for op in CONST_RULES if trace[op] == 0]
    assert missing == [], f"constant folding rules never exercised: {missing}"


def test_constant_folding_of_an_op_without_a_rule_is_an_error(monkeypatch):
    monkeypatch.delitem(consts.CONST_RULES, Op.MAXIMUM)
    with pytest.raises(MissingRuleError, match="MAXIMUM"):
        evaluate_scalar(ta.maximum(X, Y), {X: 1.0, Y: 2.0})
