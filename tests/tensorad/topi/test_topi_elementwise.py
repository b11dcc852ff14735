"""Elementwise math, broadcasting arithmetic and Tensor operators against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi = ta.topi


@pytest.mark.parametrize("name, ref, positive", [
    ("exp", np.exp, False), ("log", np.log, True), ("sqrt", np.sqrt, True),
    ("sigmoid", lambda v: 1 / (1 + np.exp(-v)), False), ("tanh", np.tanh, False),
    ("negative", np.negative, False), ("abs", np.abs, False), ("sin", np.sin, False),
    ("cos", np.cos, False),
])
def test_unary_math(rng, name, ref, positive):
    X = ta.placeholder((2, 3, 1), "float64", name="X")
    x = rng.standard_normal((2, 3, 1))
    if positive:
        x = np.abs(x) + 0.1
    Y = getattr(topi, name)(X)
    assert Y.shape == X.shape and Y.dtype == "float64" and Y.name == name
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), ref(x), rtol=1e-12)


def test_unary_on_0d_tensor():
    X = ta.placeholder((), name="X")
    y = ta.evaluate(topi.exp(X), {X: np.array(0.5, np.float32)})
    assert y.shape == () and y == pytest.approx(np.exp(0.5))


@pytest.mark.parametrize("sa, sb", [
    ((3, 4), (3, 4)), ((3, 1), (4,)), ((1,), (2, 3)), ((2, 1, 3), (4, 1)), ((), (2, 2)),
    ((5,), ()), ((1, 1), (1, 1)), ((2, 3, 1), (1, 1, 4)), ((0, 3), (1, 3)),
])
@pytest.mark.parametrize("op, ref", [("add", np.add), ("subtract", np.subtract),
                                     ("multiply", np.multiply), ("divide", np.divide),
                                     ("maximum", np.maximum), ("minimum", np.minimum)])
def test_broadcasting(rng, sa, sb, op, ref):
    A = ta.placeholder(sa, "float64", name="A")
    B = ta.placeholder(sb, "float64", name="B")
    a, b = rng.standard_normal(sa), rng.standard_normal(sb) + 3.0
    Y = getattr(topi, op)(A, B)
    want = ref(a, b)
    assert Y.shape == want.shape
    np.testing.assert_allclose(ta.evaluate(Y, {A: a, B: b}), want, rtol=1e-12)


@pytest.mark.parametrize("scalar", [2, 0.5, np.float32(1.5), np.int64(3)])
def test_tensor_and_python_scalar(rng, scalar):
    X = ta.placeholder((2, 3), name="X")
    x = (np.abs(rng.standard_normal((2, 3))) + 0.5).astype(np.float32)
    s = float(scalar)
    cases = [(topi.add(X, scalar), x + s), (topi.add(scalar, X), s + x),
             (topi.subtract(scalar, X), s - x), (topi.divide(X, scalar), x / s),
             (topi.divide(scalar, X), s / x), (topi.power(X, scalar), x ** s)]
    for Y, want in cases:
        assert Y.dtype == "float32"  # the number adopts the tensor's dtype
        np.testing.assert_allclose(ta.evaluate(Y, {X: x}), want, rtol=1e-5)


def test_tensor_operators_broadcast():
    """Tensor + - * / and unary - are the broadcasting ops (the seed's exps / sumexps)."""
    A = ta.placeholder((2, 3), "float64", name="A")
    S = ta.placeholder((2, 1), "float64", name="S")
    a = np.arange(1.0, 7.0).reshape(2, 3)
    s = np.array([[2.0], [4.0]])
    feed = {A: a, S: s}
    for Y, want in [(A / S, a / s), (A + S, a + s), (A - S, a - s), (A * S, a * s),
                    (-A, -a), (1 - A, 1 - a), (2 * A, 2 * a), (3 / A, 3 / a), (A + 1, a + 1)]:
        np.testing.assert_allclose(ta.evaluate(Y, feed), want, rtol=1e-12)
    assert (A / S).name == "divide" and (-A).name == "negative"


def test_homebrew_softmax_of_the_seed(rng):
    X = ta.placeholder((4, 6), name="X")
    W = ta.placeholder((5, 6), name="W")
    exps = topi.exp(topi.nn.dense(X, W))
    sumexps = topi.sum(exps, axis=-1, keepdims=True)
    Y = exps / sumexps
    x, w = rng.standard_normal((4, 6)) * 0.3, rng.standard_normal((5, 6)) * 0.3
    z = np.exp(x @ w.T)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x, W: w}), z / z.sum(-1, keepdims=True), rtol=1e-5)


def test_integer_broadcast_keeps_integers():
    A = ta.placeholder((3,), "int32", name="A")
    B = ta.placeholder((2, 1), "int32", name="B")
    a, b = np.array([1, 2, 3], np.int32), np.array([[10], [20]], np.int32)
    out = ta.evaluate(topi.multiply(A, B) - A, {A: a, B: b})
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a * b - a)


def test_mixed_float_dtypes_promote():
    A = ta.placeholder((2,), "float32", name="A")
    B = ta.placeholder((2,), "float64", name="B")
    assert topi.add(A, B).dtype == "float64"


def test_cast_and_broadcast_to(rng):
    X = ta.placeholder((3, 1), name="X")
    x = rng.standard_normal((3, 1)).astype(np.float32)
    np.testing.assert_allclose(ta.evaluate(topi.cast(X, "float64"), {X: x}), x.astype(np.float64))
    np.testing.assert_array_equal(ta.evaluate(topi.broadcast_to(X, (2, 3, 4)), {X: x}),
                                  np.broadcast_to(x, (2, 3, 4)))


def test_full_zeros_ones():
    X = ta.placeholder((2, 3), "float64", name="X")
    feed = {X: np.zeros((2, 3))}
    np.testing.assert_array_equal(ta.evaluate(topi.full((2, 2), 7.5), {}), np.full((2, 2), 7.5))
    assert ta.evaluate(topi.zeros((3,), "int32"), {}).tolist() == [0, 0, 0]
    assert ta.evaluate(topi.ones(()), {}) == 1.0
    like = topi.ones_like(X)
    assert like.dtype == "float64" and like.shape == (2, 3)
    np.testing.assert_array_equal(ta.evaluate(like, feed), np.ones((2, 3)))
    np.testing.assert_array_equal(ta.evaluate(topi.zeros_like(X), feed), np.zeros((2, 3)))
    np.testing.assert_array_equal(ta.evaluate(topi.full_like(X, -2), feed), np.full((2, 3), -2.0))
