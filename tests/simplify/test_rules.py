"""The algebraic simplifier: every rule is checked by evaluating both sides at random points."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
from strategies import examples
from tensorad.simplify import OptimizerContext
from tensorad.simplify.algebra.consts import evaluate_scalar
from tensorad.simplify.algebra.rules import ALGEBRA_RULES, simplify_expr
from tensorad.simplify.zeros.nonzero import NZ_RULES

import tensorad as ta
from tensorad.ir import FALSE, TRUE, Expr, Op, var
from tensorad.ir.expr import data_index
from tensorad.ir.rewrite import walk

IV = var("i", 0, 7)
JV = var("j", 0, 5)
KV = var("k", -3, 4)
X = var("x", dtype="float32")
Y = var("y", dtype="float32")
INDEX_VARS = [IV, JV, KV]
FI = ta.cast("float32", KV)  # finite wherever computed: absorbs a zero


def test_every_op_has_rule_entries():
    missing = [op for op in Op if op not in ALGEBRA_RULES]
    assert not missing, f"no algebra entry for {missing}"
    missing = [op for op in Op if op not in NZ_RULES]
    assert not missing, f"no nonzeroness rule for {missing}"


def _int_expr(rng: random.Random, depth: int) -> Expr:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(INDEX_VARS + [ta.const(rng.randint(-4, 9))])
    a, b = _int_expr(rng, depth - 1), _int_expr(rng, depth - 1)
    c = rng.choice([1, 2, 3, 5])
    kind = rng.randrange(10)
    return [a + b, a - b, a * c, c * a, a // c, a % c, ta.maximum(a, b), ta.minimum(a, b), -a,
            ta.select(_cond(rng, depth - 1), a, b)][kind]


def _cond(rng: random.Random, depth: int) -> Expr:
    a, b = _int_expr(rng, max(depth, 0)), _int_expr(rng, max(depth, 0))
    kind = rng.randrange(9)
    if kind == 6 and depth > 0:
        return _cond(rng, depth - 1) & _cond(rng, depth - 1)
    if kind == 7 and depth > 0:
        return _cond(rng, depth - 1) | _cond(rng, depth - 1)
    if kind == 8:
        return ~(a < b)
    return [a < b, a <= b, a > b, a >= b, a == b, a != b][kind % 6]


def _float_expr(rng: random.Random, depth: int) -> Expr:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([X, Y, ta.const(0.0), ta.const(1.0), ta.const(-1.0), ta.const(2.5),
                           ta.cast("float32", rng.choice(INDEX_VARS))])
    a, b = _float_expr(rng, depth - 1), _float_expr(rng, depth - 1)
    c = _cond(rng, 1)
    kind = rng.randrange(13)
    return [a + b, a - b, a * b, a / ta.const(2.0), -a, ta.exp(a * ta.const(0.1)),
            ta.select(c, a, ta.const(0.0)), ta.select(c, ta.const(0.0), a), ta.select(c, a, b),
            ta.if_then_else(c, a, ta.const(0.0)) * b, ta.cast("float32", ta.select(c, 1, 0)) * a,
            ta.select(c, a, ta.const(0.0)) + ta.select(c, b, ta.const(0.0)),
            ta.maximum(a, b)][kind]


SPECIAL = (0.0, math.inf, -math.inf, math.nan)  # where a rule that drops a factor is not exact


def _float(rng: random.Random):
    return np.float32(rng.choice(SPECIAL) if rng.random() < 0.3 else rng.uniform(-3, 3))


def _env(rng: random.Random) -> dict:
    return {IV: rng.randrange(0, 7), JV: rng.randrange(0, 5), KV: rng.randrange(-3, 4),
            X: _float(rng), Y: _float(rng)}


def _same(a, b) -> bool:
    if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
        return bool(a) == bool(b)
    fa, fb = float(a), float(b)
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    return fa == fb or math.isclose(fa, fb, rel_tol=1e-5, abs_tol=1e-5)


def _check(e: Expr, rng: random.Random, points: int = 12, trace: Counter | None = None) -> None:
    """``e`` and its simplified form agree at random points, inf and NaN included: every rule
    is exact (a literal zero is an IEEE value)."""
    s = simplify_expr(e, OptimizerContext(trace))
    for _ in range(points):
        env = _env(rng)
        with np.errstate(all="ignore"):
            try:
                want = evaluate_scalar(e, env)
            except (ValueError, OverflowError):  # int(NaN), int(inf): no value to compare
                continue
            got = evaluate_scalar(s, env)
        assert _same(want, got), f"{e}  ->  {s}: {want} != {got} at {env}"


TARGETED = [
    lambda: (IV + 1) - 1, lambda: 2 * (JV + 3) - JV, lambda: -(IV - JV), lambda: IV - (-JV),
    lambda: (IV * 4 + 3) // 2, lambda: (IV * 4 + 3) % 4, lambda: (KV // 5) // 3, lambda: IV // 1,
    lambda: IV % 1, lambda: (IV + 7 * JV) % 7, lambda: (IV + 7 * JV) // 7,
    lambda: IV - 2 * (IV // 2), lambda: ta.maximum(IV, IV - 1), lambda: ta.minimum(IV, IV + 1),
    lambda: ta.maximum(JV, JV), lambda: ta.minimum(JV, JV),
    lambda: IV + 1 <= 10, lambda: IV < 0, lambda: 2 * IV <= 2 * JV + 1, lambda: 3 * IV == 3 * JV + 1,
    lambda: 3 * IV != 3 * JV + 1, lambda: 0 <= JV - 2 * IV, lambda: ~(IV < JV), lambda: ~~(IV < JV),
    lambda: (IV < JV) & TRUE, lambda: TRUE & (IV < JV), lambda: (IV < JV) & FALSE,
    lambda: ((IV < JV) & (JV < 3)) & (IV < JV), lambda: (IV < JV) & (IV >= JV),
    lambda: (IV < JV) | FALSE, lambda: FALSE | (IV < JV), lambda: (IV < JV) | TRUE,
    lambda: ((IV < JV) | (JV < 3)) | (IV < JV), lambda: (IV < JV) | (IV >= JV),
    lambda: X + 0.0, lambda: 0.0 + X, lambda: X + (-Y), lambda: (-X) + Y, lambda: X - 0.0,
    lambda: 0.0 - X, lambda: X - X, lambda: X - (-Y), lambda: X * 1.0, lambda: 1.0 * X,
    lambda: X * 0.0, lambda: 0.0 * X, lambda: X * -1.0, lambda: -1.0 * X, lambda: X / 1.0,
    lambda: 0.0 / X, lambda: FI * 0.0, lambda: 0.0 * FI, lambda: FI - FI,
    lambda: ta.select(ta.const(0.0) / X > Y, ta.const(0.0) / X, Y),  # a 0/0 NaN feeding a comparison
    lambda: ta.const(0.0) - (-X), lambda: -(ta.const(0.0) - X),
    lambda: -(X - Y), lambda: ta.power(X, 1.0),
    lambda: ta.power(X, 0.0), lambda: ta.maximum(X, X), lambda: ta.minimum(X, X),
    lambda: ta.select(IV < JV, X, 0.0) * Y, lambda: Y * ta.select(IV < JV, X, 0.0),
    lambda: ta.select(IV < JV, X, 0.0) / Y, lambda: -ta.select(IV < JV, X, 0.0),
    lambda: ta.select(IV < JV, X, 0.0) * FI, lambda: FI * ta.select(IV < JV, X, 0.0),
    lambda: ta.select(IV < JV, X, 0.0) / 2.0, lambda: ta.cast("float32", IV < JV) * FI,
    lambda: FI * ta.cast("float32", IV < JV),
    lambda: ta.select(IV < JV, X, 0.0) + ta.select(IV < JV, Y, 0.0),
    lambda: ta.select(IV < JV, X, 0.0) - ta.select(IV < JV, Y, 0.0),
    lambda: ta.cast("float32", IV < JV) * X, lambda: X * ta.cast("float32", IV < JV),
    lambda: ta.select(TRUE, X, Y), lambda: ta.select(FALSE, X, Y), lambda: ta.select(IV < JV, X, X),
    lambda: ta.select(~(X < Y), X, Y), lambda: ta.select(IV < JV, 0.0, X),
    lambda: ta.select(IV < JV, ta.select(IV < JV, X, Y), 0.0),
    lambda: ta.select(IV < JV, X, ta.select(IV < JV, Y, 0.0)),
    lambda: ta.select(IV < JV, ta.select(JV < 3, X, 0.0), 0.0),
    lambda: ta.if_then_else(IV < JV, ta.select(JV < 3, X, 0.0), 0.0),
    lambda: ta.select(IV < JV, TRUE, FALSE), lambda: ta.cast("float32", ta.select(IV < JV, 1, 0)),
    lambda: ta.exp(ta.const(0.5)) + ta.const(1.0), lambda: ta.cast("int32", X) + 1,
    lambda: ta.cast("bfloat16", ta.cast("float32", ta.cast("bfloat16", X * Y))) * 1.0,
    lambda: ta.cast("float16", ta.cast("float32", ta.cast("float16", X + Y))) * 1.0,
    lambda: ta.cast("float16", ta.cast("float32", ta.cast("bfloat16", X + Y))) * 1.0,  # not a round trip
    lambda: data_index(IV + 5, 1, "clip") + JV, lambda: data_index(IV - 3, 1, "wrap") * JV,
]


def test_targeted_rules_preserve_values():
    rng = random.Random(1)
    for make in TARGETED:
        _check(make(), rng)


def test_random_expressions_preserve_values_and_cover_every_rule():
    rng = random.Random(7)
    trace = Counter()  # each check has a context of its own: the rules run again every time
    for make in TARGETED:
        _check(make(), rng, points=2, trace=trace)
    reductions(OptimizerContext(trace))
    for _ in range(examples(200)):
        _check(_int_expr(rng, 4), rng, points=6, trace=trace)
        _check(_cond(rng, 3), rng, points=6, trace=trace)
        _check(_float_expr(rng, 4), rng, points=6, trace=trace)
    names = {name for table in ALGEBRA_RULES.values() for name, _ in table} | {"const-fold"}
    assert names - set(trace) == set(), f"rules never exercised: {sorted(names - set(trace))}"


def reductions(ctx=None) -> None:
    """The rules that need reads or reductions rather than scalars (values: ``test_data_address.py``)."""
    k = ta.reduce_axis((0, 4), "k")
    A = ta.placeholder((4,), name="A")
    L = ta.placeholder((4,), "int64", name="L")
    address = simplify_expr(L[k] == JV, ctx)  # lo <= L[k] < hi && data_index(L[k]) == j
    assert any(n.op is Op.DATA_INDEX for n in walk(address))
    assert simplify_expr(ta.sum(A[k], k, where=FALSE), ctx).op is Op.CONST
    assert simplify_expr(ta.sum(ta.cast("float32", k) * 0.0, k), ctx).op is Op.CONST
    assert simplify_expr(ta.sum(A[k] * 0.0, k), ctx).op is Op.REDUCE  # A may hold inf or NaN
    assert simplify_expr(ta.max(A[k], k, where=FALSE), ctx).arg == -math.inf


@pytest.mark.parametrize("expr, text", [
    (lambda: (IV + 1) - 1, "i"),
    (lambda: 2 * (JV + 3) - JV, "(j + 6)"),
    (lambda: JV + IV, "(i + j)"),
    (lambda: 9 - IV + 0, "(9 - i)"),
    (lambda: IV + 1 <= 10, "True"),
    (lambda: IV + 1 < 5, "(i <= 3)"),
    (lambda: 0 <= JV - 2 * IV, "((2 * i) <= j)"),
    (lambda: IV - 2 * (IV // 2), "(i % 2)"),
    (lambda: (KV // 25) // 20, "(k // 500)"),
    (lambda: (IV * 4 + 3) // 2, "((2 * i) + 1)"),
    (lambda: ta.select(IV < 5, ta.const(2.0), ta.const(0.0)) * ta.const(3.0),
     "select((i <= 4), 6.000000f, 0.000000f)"),
    (lambda: X * 0.0, "(x * 0.000000f)"),  # x may be inf or NaN: 0 * x is not 0
    (lambda: ta.const(0.0) / X, "(0.000000f / x)"),
    (lambda: ta.cast("float32", IV) * 0.0, "0.000000f"),
    (lambda: ta.select(IV < JV, X, X), "x"),
])
def test_normal_forms(expr, text):
    assert str(simplify_expr(expr())) == text


def test_a_half_value_widened_and_rounded_back_is_itself():
    # bfloat16(float32(h)) = h for a read of a half tensor too (a half head in an adjoint),
    # not only for a rounding cast; float16(float32(bfloat16 h)) is no round trip
    Hb = ta.placeholder((4,), "bfloat16", "Hb")
    i = var("i", 0, 4)
    read = Expr(Op.READ, "bfloat16", (i,), Hb)
    assert simplify_expr(ta.cast("bfloat16", ta.cast("float32", read))) is read
    other = simplify_expr(ta.cast("float16", ta.cast("float32", read)))
    assert other.op is Op.CAST and other.dtype == "float16"


def test_constant_folding_rounds_to_float32():
    e = simplify_expr(ta.const(0.1) + ta.const(0.2))
    assert e.op is Op.CONST and e.arg == float(np.float32(0.1) + np.float32(0.2))
    assert simplify_expr(ta.const(7) // ta.const(-2)).arg == -4  # floor division
    assert simplify_expr(ta.const(7) % ta.const(-2)).arg == -1
    assert simplify_expr(ta.const(1) // ta.const(0)).op is Op.FLOORDIV  # left to run time


def test_simplify_is_idempotent_on_random_expressions():
    rng = random.Random(3)
    for _ in range(examples(100)):
        e = simplify_expr(_float_expr(rng, 4))
        assert simplify_expr(e) is e
