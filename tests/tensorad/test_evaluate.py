"""ta.evaluate against NumPy formulas written here: every op, every reducer, every form of body."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples, random_feed, random_program

import tensorad as ta
from tensorad.ir import Op, var
from tensorad.ir.expr import data_index
from tensorad.lang import make_compute
from tensorad.reference import ARRAY_RULES, CONTEXT_OPS, numpy_eval


def _f32(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# ---- every op ---------------------------------------------------------------------------
# op -> (body built from reads a = A[i], b = B[i] (positive floats) and the index i, NumPy oracle)
def _cases():
    return {
        Op.VAR: (lambda a, b, i: ta.cast("float32", i), lambda a, b, i: i.astype(np.float32)),
        Op.CONST: (lambda a, b, i: ta.const(2.5), lambda a, b, i: np.full_like(a, 2.5)),
        Op.ADD: (lambda a, b, i: a + b, lambda a, b, i: a + b),
        Op.SUB: (lambda a, b, i: a - b, lambda a, b, i: a - b),
        Op.MUL: (lambda a, b, i: a * b, lambda a, b, i: a * b),
        Op.DIV: (lambda a, b, i: a / b, lambda a, b, i: a / b),
        Op.FLOORDIV: (lambda a, b, i: ta.cast("float32", (i - 5) // 3),
                      lambda a, b, i: ((i - 5) // 3).astype(np.float32)),
        Op.MOD: (lambda a, b, i: ta.cast("float32", (i - 5) % 3),
                 lambda a, b, i: ((i - 5) % 3).astype(np.float32)),
        Op.NEG: (lambda a, b, i: -a, lambda a, b, i: -a),
        Op.POW: (lambda a, b, i: ta.power(b, a), lambda a, b, i: b ** a),
        Op.MAXIMUM: (lambda a, b, i: ta.maximum(a, b), lambda a, b, i: np.maximum(a, b)),
        Op.MINIMUM: (lambda a, b, i: ta.minimum(a, b), lambda a, b, i: np.minimum(a, b)),
        Op.LT: (lambda a, b, i: ta.select(a < b, a, b), lambda a, b, i: np.where(a < b, a, b)),
        Op.LE: (lambda a, b, i: ta.select(i <= 3, a, b), lambda a, b, i: np.where(i <= 3, a, b)),
        Op.GT: (lambda a, b, i: ta.select(a > 0.0, a, b), lambda a, b, i: np.where(a > 0, a, b)),
        Op.GE: (lambda a, b, i: ta.select(i >= 3, a, b), lambda a, b, i: np.where(i >= 3, a, b)),
        Op.EQ: (lambda a, b, i: ta.select(i == 2, a, b), lambda a, b, i: np.where(i == 2, a, b)),
        Op.NE: (lambda a, b, i: ta.select(i != 2, a, b), lambda a, b, i: np.where(i != 2, a, b)),
        Op.AND: (lambda a, b, i: ta.select((i > 1) & (a > 0.0), a, b),
                 lambda a, b, i: np.where((i > 1) & (a > 0), a, b)),
        Op.OR: (lambda a, b, i: ta.select((i < 1) | (i > 4), a, b),
                lambda a, b, i: np.where((i < 1) | (i > 4), a, b)),
        Op.NOT: (lambda a, b, i: ta.select(~(i < 3), a, b), lambda a, b, i: np.where(~(i < 3), a, b)),
        Op.SELECT: (lambda a, b, i: ta.select(a > b, a - b, b), lambda a, b, i: np.where(a > b, a - b, b)),
        Op.IF_THEN_ELSE: (lambda a, b, i: ta.if_then_else(a > b, a, b * 2.0),
                          lambda a, b, i: np.where(a > b, a, b * 2)),
        Op.CAST: (lambda a, b, i: ta.cast("float32", ta.cast("int32", a * 3.0)),
                  lambda a, b, i: np.trunc(a * 3).astype(np.float32)),
        Op.EXP: (lambda a, b, i: ta.exp(a), lambda a, b, i: np.exp(a)),
        Op.LOG: (lambda a, b, i: ta.log(b), lambda a, b, i: np.log(b)),
        Op.SQRT: (lambda a, b, i: ta.sqrt(b), lambda a, b, i: np.sqrt(b)),
        Op.TANH: (lambda a, b, i: ta.tanh(a), lambda a, b, i: np.tanh(a)),
        Op.SIGMOID: (lambda a, b, i: ta.sigmoid(a), lambda a, b, i: 1 / (1 + np.exp(-a))),
        Op.ABS: (lambda a, b, i: ta.abs(a), lambda a, b, i: np.abs(a)),
        Op.SIN: (lambda a, b, i: ta.sin(a), lambda a, b, i: np.sin(a)),
        Op.COS: (lambda a, b, i: ta.cos(a), lambda a, b, i: np.cos(a)),
        Op.ERF: (lambda a, b, i: ta.erf(a * 2.0),
                 lambda a, b, i: np.array([math.erf(v) for v in 2 * a], a.dtype)),
        Op.READ: (lambda a, b, i: a, lambda a, b, i: a),
        Op.DATA_INDEX: (lambda a, b, i: ta.cast("float32", data_index(ta.cast("int32", a * 3.0), 4, "wrap")),
                        lambda a, b, i: np.mod(np.trunc(a * 3), 4).astype(np.float32)),
        Op.REDUCE: None,  # test_reducers below
    }


def test_every_op_has_a_rule_and_a_case():
    for op in Op:
        assert op in ARRAY_RULES or op in CONTEXT_OPS, f"evaluator has no rule for {op}"
        assert op in _cases(), f"test_evaluate has no case for {op}"


@pytest.mark.parametrize("op", [op for op in Op if op is not Op.REDUCE], ids=lambda op: op.name)
def test_op(op, rng):
    build, oracle = _cases()[op]
    A = ta.placeholder((7,), name="A")
    B = ta.placeholder((7,), name="B")
    C = ta.compute((7,), lambda i: build(A[i], B[i], i), name="C")
    assert any(n.op is op for n in ta.ir.walk(C.op.body[0])), f"the case for {op} does not use it"
    a, b = _f32(rng, 7), _f32(rng, 7, lo=0.5, hi=2.0)
    got = ta.evaluate(C, {A: a, B: b})
    assert got.dtype == np.float32 and got.shape == (7,)
    np.testing.assert_allclose(got, oracle(a, b, np.arange(7)), rtol=1e-6, atol=1e-6)


def test_integer_floor_division_and_modulo_have_python_semantics():
    X = ta.placeholder((8,), "int32", name="X")
    Q = ta.compute((8,), lambda i: X[i] // 3, name="Q")
    R = ta.compute((8,), lambda i: X[i] % (-3), name="R")
    x = np.array([-7, -6, -1, 0, 1, 5, 6, 7], np.int32)
    q, r = ta.evaluate([Q, R], {X: x})
    assert q.dtype == np.int32 and r.dtype == np.int32
    assert q.tolist() == [v // 3 for v in x.tolist()]
    assert r.tolist() == [v % -3 for v in x.tolist()]


def test_casts():
    X = ta.placeholder((5,), name="X")
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7], np.float32)
    to_int = ta.compute((5,), lambda i: ta.cast("int32", X[i]), name="to_int")
    to_f64 = ta.compute((5,), lambda i: ta.cast("float64", X[i]) * 2.0, name="to_f64")
    flag = ta.compute((5,), lambda i: ta.cast("float32", X[i] > 0.0), name="flag")
    ti, tf, fl = ta.evaluate([to_int, to_f64, flag], {X: x})
    assert ti.dtype == np.int32 and ti.tolist() == [-2, 0, 0, 0, 2]  # truncation toward zero
    assert tf.dtype == np.float64 and np.array_equal(tf, x.astype(np.float64) * 2)
    assert fl.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_index_variables_as_values():
    E = ta.compute((3, 4), lambda i, j: ta.cast("float32", i * 10 + j), name="E")
    np.testing.assert_array_equal(ta.evaluate(E, {}), np.arange(3)[:, None] * 10 + np.arange(4))


# ---- reductions ------------------------------------------------------------------------
@pytest.mark.parametrize("name,oracle", [("sum", np.sum), ("max", np.max), ("min", np.min),
                                         ("prod", np.prod)])
def test_builtin_reducers(name, oracle, rng):
    A = ta.placeholder((3, 5), name="A")
    k = ta.reduce_axis((0, 5), "k")
    R = ta.compute((3,), lambda i: getattr(ta, name)(A[i, k], axis=k), name="R")
    a = _f32(rng, 3, 5, lo=0.5, hi=1.5)
    np.testing.assert_allclose(ta.evaluate(R, {A: a}), oracle(a, axis=1), rtol=1e-6)


@pytest.mark.parametrize("name,identity", [("sum", 0.0), ("max", -np.inf), ("min", np.inf),
                                           ("prod", 1.0)])
def test_where_condition_and_empty_reduction_gives_identity(name, identity, rng):
    A = ta.placeholder((4, 6), name="A")
    k = ta.reduce_axis((0, 6), "k")
    # row i reduces over k < i: row 0 is empty
    R = ta.compute((4,), lambda i: getattr(ta, name)(A[i, k], axis=k, where=k < i), name="R")
    a = _f32(rng, 4, 6, lo=0.5, hi=1.5)
    want = [getattr(np, name)(a[i, :i]) if i else identity for i in range(4)]
    np.testing.assert_allclose(ta.evaluate(R, {A: a}), np.array(want, np.float32), rtol=1e-6)


def test_reduction_over_two_axes_with_lo_offset(rng):
    A = ta.placeholder((4, 5, 6), name="A")
    k = ta.reduce_axis((1, 4), "k")
    m = ta.reduce_axis((2, 6), "m")
    R = ta.compute((5,), lambda j: ta.sum(A[k, j, m], axis=[k, m]), name="R")
    a = _f32(rng, 4, 5, 6)
    np.testing.assert_allclose(ta.evaluate(R, {A: a}), a[1:4, :, 2:6].sum(axis=(0, 2)), rtol=1e-5)


def _argmax():
    def combine(x, y):
        keep = x[1] >= y[1]  # ties keep the left (earlier) operand: the first maximum wins
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    return ta.comm_reducer(combine, lambda t0, t1: (ta.const(-1, t0), ta.min_value(t1)), name="argmax")


def test_argmax_tuple_reduction_with_ties():
    A = ta.placeholder((4, 6), name="A")
    k = ta.reduce_axis((0, 6), "k")
    idx, val = ta.compute((4,), lambda i: _argmax()((k, A[i, k]), axis=k), name="am")
    a = np.array([[1, 3, 3, 0, 3, 2], [5, 5, 5, 5, 5, 5], [0, 1, 2, 3, 4, 5], [9, 1, 9, 1, 9, 1]],
                 np.float32)
    got_idx, got_val = ta.evaluate([idx, val], {A: a})
    assert got_idx.dtype == np.int32 and got_val.dtype == np.float32
    assert got_idx.tolist() == np.argmax(a, axis=1).tolist()
    assert got_val.tolist() == a.max(axis=1).tolist()


def test_argmax_with_where_and_empty_rows():
    A = ta.placeholder((3, 5), name="A")
    k = ta.reduce_axis((0, 5), "k")
    idx, val = ta.compute((3,), lambda i: _argmax()((k, A[i, k]), axis=k, where=k >= 2 * i + 1),
                          name="am")
    a = np.array([[4, 1, 2, 3, 0], [1, 2, 3, 4, 5], [5, 4, 3, 2, 1]], np.float32)
    got_idx, got_val = ta.evaluate((idx, val), {A: a})
    assert got_idx.tolist() == [3, 4, -1]  # row 2 has no k >= 5: the identity
    assert got_val.tolist() == [3.0, 5.0, -np.inf]


def test_custom_product_combiner(rng):
    myprod = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    R = ta.compute((3,), lambda i: myprod(A[i, k] + 1.0, axis=k, where=k != 1), name="R")
    a = _f32(rng, 3, 4)
    want = np.prod(np.delete(a, 1, axis=1) + 1, axis=1)
    np.testing.assert_allclose(ta.evaluate(R, {A: a}), want, rtol=1e-5)


def test_custom_two_value_sum_and_count():
    sum_count = ta.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]),
                                lambda t0, t1: (ta.const(0, t0), ta.const(0, t1)), name="sum_count")
    A = ta.placeholder((2, 5), name="A")
    k = ta.reduce_axis((0, 5), "k")
    s, c = ta.compute((2,), lambda i: sum_count((A[i, k], ta.const(1)), axis=k, where=A[i, k] > 0.0),
                      name="sc")
    a = np.array([[1, -1, 2, -2, 3], [-1, -1, -1, -1, 5]], np.float32)
    got_s, got_c = ta.evaluate([s, c], {A: a})
    assert got_s.tolist() == [6.0, 5.0] and got_c.tolist() == [3, 1]


def test_nested_reduction_is_lifted_and_evaluated(rng):
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    M = ta.compute((3,), lambda i: ta.sum(A[i, k], axis=k) / 4.0 + 1.0, name="M")
    assert M.op.body[0].op is not Op.REDUCE  # the sum became a tensor of its own
    a = _f32(rng, 3, 4)
    np.testing.assert_allclose(ta.evaluate(M, {A: a}), a.mean(axis=1) + 1, rtol=1e-6)


def test_softmax_chain(rng):
    X = ta.placeholder((3, 5), name="X")
    k = ta.reduce_axis((0, 5), "k")
    m = ta.compute((3,), lambda i: ta.max(X[i, k], axis=k), name="m")
    E = ta.compute((3, 5), lambda i, j: ta.exp(X[i, j] - m[i]), name="E")
    k2 = ta.reduce_axis((0, 5), "k2")
    S = ta.compute((3,), lambda i: ta.sum(E[i, k2], axis=k2), name="S")
    Y = ta.compute((3, 5), lambda i, j: E[i, j] / S[i], name="Y")
    x = _f32(rng, 3, 5)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), e / e.sum(axis=1, keepdims=True), rtol=1e-6)


# ---- bodies and reads --------------------------------------------------------------------
def test_multi_output_compute(rng):
    A = ta.placeholder((2, 3), name="A")
    P, Q = ta.compute((2, 3), lambda i, j: (A[i, j] * 2.0, ta.cast("int32", i + j)), name="PQ")
    assert P.op is Q.op
    a = _f32(rng, 2, 3)
    p, q = ta.evaluate([P, Q], {A: a})
    np.testing.assert_array_equal(p, a * 2)
    assert q.dtype == np.int32 and q.tolist() == [[0, 1, 2], [1, 2, 3]]


def test_if_then_else_padding(rng):
    X = ta.placeholder((4, 5), name="X")
    pad = 2
    P = ta.compute((4 + 2 * pad, 5 + 2 * pad),
                   lambda i, j: ta.if_then_else((i >= pad) & (i < 4 + pad) & (j >= pad) & (j < 5 + pad),
                                                X[i - pad, j - pad], 0.0), name="P")
    x = _f32(rng, 4, 5)
    np.testing.assert_array_equal(ta.evaluate(P, {X: x}), np.pad(x, pad))


def test_padded_convolution_1d(rng):
    X = ta.placeholder((6,), name="X")
    W = ta.placeholder((3,), name="W")
    r = ta.reduce_axis((0, 3), "r")
    Y = ta.compute((6,), lambda i: ta.sum(
        ta.if_then_else((i + r - 1 >= 0) & (i + r - 1 < 6), X[i + r - 1], 0.0) * W[r], axis=r), name="Y")
    x, w = _f32(rng, 6), _f32(rng, 3)
    want = np.correlate(np.pad(x, 1), w, mode="valid")
    np.testing.assert_allclose(ta.evaluate(Y, {X: x, W: w}), want, rtol=1e-5, atol=1e-6)


def test_lazy_branch_is_not_evaluated_where_untaken():
    X = ta.placeholder((4,), name="X")
    L = ta.compute((4,), lambda i: ta.if_then_else(X[i] > 0.0, ta.log(X[i]), -1.0), name="L")
    x = np.array([-1.0, 0.0, 1.0, np.e], np.float32)
    with np.errstate(all="raise"):  # the evaluator silences the untaken log(-1) itself
        got = ta.evaluate(L, {X: x})
    np.testing.assert_allclose(got, [-1.0, -1.0, 0.0, 1.0], rtol=1e-6)


def test_flatten_and_reshape_with_floordiv_and_mod(rng):
    X = ta.placeholder((2, 3, 4), name="X")
    F = ta.compute((24,), lambda n: X[n // 12, n // 4 % 3, n % 4], name="F")
    R = ta.compute((6, 4), lambda a, b: F[a * 4 + b], name="R")
    x = _f32(rng, 2, 3, 4)
    f, r = ta.evaluate([F, R], {X: x})
    np.testing.assert_array_equal(f, x.reshape(-1))
    np.testing.assert_array_equal(r, x.reshape(6, 4))


def test_transposed_repeated_and_shifted_reads(rng):
    A = ta.placeholder((4, 4), name="A")
    S = ta.compute((4, 4), lambda i, j: A[i, j] + A[j, i] * A[j, i], name="S")
    T = ta.compute((3,), lambda i: A[i + 1, 3 - i] - A[i, i], name="T")
    a = _f32(rng, 4, 4)
    s, t = ta.evaluate([S, T], {A: a})
    np.testing.assert_allclose(s, a + a.T * a.T, rtol=1e-6)
    np.testing.assert_allclose(t, [a[i + 1, 3 - i] - a[i, i] for i in range(3)], rtol=1e-6)


def test_zero_dim_tensors(rng):
    s = ta.placeholder((), name="s")
    A = ta.placeholder((3,), name="A")
    k = ta.reduce_axis((0, 3), "k")
    total = ta.compute((), lambda: ta.sum(A[k] * s[()], axis=k), name="total")
    scaled = ta.compute((3,), lambda i: A[i] + total[()], name="scaled")
    a = _f32(rng, 3)
    t, sc = ta.evaluate([total, scaled], {s: np.float32(2.0), A: a})
    assert t.shape == () and t.dtype == np.float32
    np.testing.assert_allclose(t, 2 * a.sum(), rtol=1e-6)
    np.testing.assert_allclose(sc, a + 2 * a.sum(), rtol=1e-6)


def test_integer_tensors_and_int64():
    X = ta.placeholder((2, 3), "int64", name="X")
    k = ta.reduce_axis((0, 3), "k")
    S = ta.compute((2,), lambda i: ta.sum(X[i, k] * X[i, k], axis=k), name="S")
    M = ta.compute((2,), lambda i: ta.max(X[i, k], axis=k), name="M")
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.int64)
    s, m = ta.evaluate([S, M], {X: x})
    assert s.dtype == np.int64 and s.tolist() == [14, 77]
    assert m.tolist() == [3, 5]


def test_float64_stays_float64(rng):
    X = ta.placeholder((3,), "float64", name="X")
    Y = ta.compute((3,), lambda i: ta.exp(X[i]) * (1.0 / 3.0), name="Y")
    x = rng.uniform(size=3)
    y = ta.evaluate(Y, {X: x})
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, np.exp(x) / 3, rtol=1e-15)


def test_output_forms_and_placeholder_output(rng):
    A = ta.placeholder((2,), name="A")
    B = ta.compute((2,), lambda i: A[i] + 1.0, name="B")
    a = _f32(rng, 2)
    assert isinstance(ta.evaluate(B, {A: a}), np.ndarray)
    assert isinstance(ta.evaluate([B], {A: a}), list)
    assert isinstance(ta.evaluate((B, A), {A: a}), tuple)
    out_a = ta.evaluate(A, {A: a})
    out_a[0] = 99.0  # a copy: the caller's array is untouched
    assert a[0] != 99.0
    assert ta.evaluate([], {}) == []


def test_each_tensor_is_evaluated_once(rng, monkeypatch):
    A = ta.placeholder((3,), name="A")
    B = ta.compute((3,), lambda i: A[i] * 2.0, name="B")
    C = ta.compute((3,), lambda i: B[i] + 1.0, name="C")
    D = ta.compute((3,), lambda i: B[i] - 1.0, name="D")
    E = ta.compute((3,), lambda i: C[i] * D[i], name="E")
    calls = []
    real = numpy_eval.evaluate_op
    monkeypatch.setattr(numpy_eval, "evaluate_op", lambda op, v, *a: calls.append(op.name) or real(op, v, *a))
    a = _f32(rng, 3)
    np.testing.assert_allclose(ta.evaluate([E, C], {A: a}), [(2 * a + 1) * (2 * a - 1), 2 * a + 1],
                               rtol=1e-6)
    assert sorted(calls) == ["B", "C", "D", "E"]


def test_out_of_bounds_read_detected_at_evaluation():
    X = ta.placeholder((4,), name="X")
    i = var("i", 0, 5)
    (T,) = make_compute("T", (i,), (X[i] * 2.0,), check_bounds=False)
    with pytest.raises(ta.OutOfBoundsError, match=r"T: read X\(i\).*X \[4\].*index \[4\] at i=4"):
        ta.evaluate(T, {X: np.zeros(4, np.float32)})


def test_out_of_bounds_excused_by_where_but_not_outside_it():
    X = ta.placeholder((4,), name="X")
    j = var("j", 0, 2)
    k = ta.reduce_axis((0, 6), "k")
    (ok,) = make_compute("ok", (j,), (ta.sum(X[k], axis=k, where=k < 4 - j),), check_bounds=False)
    np.testing.assert_array_equal(ta.evaluate(ok, {X: np.arange(4, dtype=np.float32)}), [6, 3])
    j2 = var("j", 0, 2)
    k2 = ta.reduce_axis((0, 6), "k")
    (bad,) = make_compute("bad", (j2,), (ta.sum(X[k2], axis=k2, where=k2 < 4 + j2),),
                          check_bounds=False)
    with pytest.raises(ta.OutOfBoundsError, match=r"bad: .*index \[4\] at j=1, k=4"):
        ta.evaluate(bad, {X: np.zeros(4, np.float32)})


# ---- random programs against a per-element Python interpreter ------------------------------
# The oracle: a direct recursive interpretation of one element at a time with Python scalars,
# written here independently of the evaluator (no NumPy broadcasting, no ir.rewrite.fold).
def _nanmax(a, b):
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _nanmin(a, b):
    return math.nan if math.isnan(a) or math.isnan(b) else min(a, b)


def _pow(a, b):
    """C's ``pow``: ``0 ** -1 = inf``, a negative base to a non-integer power is NaN."""
    if a == 0 and b < 0:
        return math.inf
    if a < 0 and not float(b).is_integer():
        return math.nan
    try:
        return a ** b
    except OverflowError:
        return math.inf if a > 0 or float(b) % 2 == 0 else -math.inf


_PY_SCALAR = {
    Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
    Op.DIV: lambda a, b: a / b, Op.FLOORDIV: lambda a, b: a // b, Op.MOD: lambda a, b: a % b,
    Op.POW: _pow, Op.MAXIMUM: _nanmax, Op.MINIMUM: _nanmin,
    Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
    Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
    Op.AND: lambda a, b: a and b, Op.OR: lambda a, b: a or b, Op.NOT: lambda a: not a,
    Op.NEG: lambda a: -a, Op.ABS: abs,
    Op.EXP: lambda a: math.exp(a) if a < 700 else math.inf,
    Op.LOG: lambda a: math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan),
    Op.SQRT: lambda a: math.sqrt(a) if a >= 0 else math.nan,
    Op.TANH: math.tanh, Op.SIGMOID: lambda a: 1 / (1 + math.exp(-a)) if a > -700 else 0.0,
    Op.SIN: lambda a: math.sin(a) if math.isfinite(a) else math.nan,
    Op.COS: lambda a: math.cos(a) if math.isfinite(a) else math.nan,
    Op.ERF: math.erf,
}


class _Interp:
    def __init__(self, feed):
        self.feed = feed
        self.cache = {}

    def element(self, t, idx):
        if t.is_placeholder:
            return self.feed[t][idx].item()
        key = (t, idx)
        if key not in self.cache:
            env = dict(zip(t.op.axes, idx))
            self.cache[key] = self.eval(t.op.body[t.value_index], env)
        return self.cache[key]

    def eval(self, e, env):
        op = e.op
        if op is Op.VAR:
            return env[e]
        if op is Op.CONST:
            return e.arg
        if op is Op.READ:
            idx = tuple(self.eval(i, env) for i in e.src)
            assert all(0 <= i < s for i, s in zip(idx, e.arg.shape)), "oracle read out of bounds"
            return self.element(e.arg, idx)
        if op in (Op.SELECT, Op.IF_THEN_ELSE):
            c = self.eval(e.src[0], env)
            if op is Op.IF_THEN_ELSE:
                return self.eval(e.src[1] if c else e.src[2], env)
            a, b = self.eval(e.src[1], env), self.eval(e.src[2], env)
            return a if c else b
        if op is Op.CAST:
            x = self.eval(e.src[0], env)
            return float(x) if e.dtype in ta.FLOAT_DTYPES else bool(x) if e.dtype == "bool" else int(x)
        if op is Op.REDUCE:
            return self.reduce(e, env)
        return _PY_SCALAR[op](*(self.eval(s, env) for s in e.src))

    def reduce(self, e, env):
        ra = e.arg
        comb = ra.combiner
        acc = [self.eval(i, {}) for i in comb.identity]
        for point in itertools.product(*(range(a.lo, a.hi) for a in ra.axes)):
            inner = {**env, **dict(zip(ra.axes, point))}
            if not self.eval(e.src[0], inner):
                continue
            vals = [self.eval(s, inner) for s in e.src[1:]]
            cenv = {**dict(zip(comb.lhs, acc)), **dict(zip(comb.rhs, vals))}
            acc = [self.eval(r, cenv) for r in comb.result]
        return acc[ra.value_index]


def _interpret(tensor, feed):
    it = _Interp(feed)
    out = np.empty(tensor.shape, dtype=np.float64 if tensor.dtype in ta.FLOAT_DTYPES else np.int64)
    for idx in np.ndindex(*tensor.shape):
        out[idx] = it.element(tensor, idx)
    return out


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_program(dtype="float64"), seed=st.integers(0, 2**16))
def test_random_programs_agree_with_elementwise_interpreter(program, seed):
    feed = random_feed(program.placeholders, np.random.default_rng(seed))
    got = ta.evaluate(program.outputs, feed)
    for t, g in zip(program.outputs, got):
        assert g.shape == t.shape and g.dtype == np.dtype(t.dtype)
        np.testing.assert_allclose(g, _interpret(t, feed), rtol=1e-9, atol=1e-9, equal_nan=True,
                                   err_msg=ta.PrintTensorRecursively(t))


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_program(dtype="float64"), seed=st.integers(0, 2**16))
def test_random_programs_in_other_summation_orders_agree_with_the_interpreter(program, seed):
    # the fuzz oracle evaluates in these orders after a mismatch: they must run wherever
    # evaluate does, with its dtypes and shapes (the interpreter folds in index order)
    feed = random_feed(program.placeholders, np.random.default_rng(seed))
    for order in ("sequential", "reversed"):
        got = numpy_eval.evaluate_in_order(program.outputs, feed, order)
        for t, g in zip(program.outputs, got):
            assert g.shape == t.shape and g.dtype == np.dtype(t.dtype)
            np.testing.assert_allclose(g, _interpret(t, feed), rtol=1e-9, atol=1e-9, equal_nan=True,
                                       err_msg=f"{order}: {ta.PrintTensorRecursively(t)}")


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_program(dtype="float32"), seed=st.integers(0, 2**16))
def test_random_float32_programs_stay_float32(program, seed):
    feed = random_feed(program.placeholders, np.random.default_rng(seed))
    out = ta.evaluate(program.output, feed)
    assert out.dtype == np.float32 and out.shape == program.output.shape
    want = _interpret(program.output, feed)
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3, equal_nan=True)
