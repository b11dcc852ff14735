"""Python floats combined by tensorad operations before they meet float64 data:
``(1.0 - ta.select(X[i] > 0, 11/12, 1/120)) * X[i]``, ``ta.const(2.0) * 0.1 * X[i]``,
``ta.sqrt(2.0 / math.pi) * X[i]``, ``(i * 0.1 + 0.3) * X[i]`` over a float64 ``X``.  A Python float
that met no dtype was a float32 constant, and the float32 expression of such constants was cast to
float64 where it met the data: the float64 program computed with float32 roundings (a relative error
of about 3e-8).  Python floats are weak now, as in NumPy and JAX: an expression of them (and of the
integers they meet) takes the float dtype it meets, and is float32 only where it meets none.  An
explicit ``ta.const(v, "float32")`` stays float32: cast to float64 it holds its float32 value.

Oracles: NumPy formulas in float64 (and in float32 and float16 for the programs that keep their
rounding); ``ta.evaluate``."""

import math

import numpy as np
import pytest

import tensorad as ta

N = 6
XS = np.array([1.5, -0.25, 2.0, -3.0, 0.7, 0.3])
HS = np.array([0.3, -1.1, 2.0, 0.5, 1.0, -0.7])
IDX = np.arange(N, dtype=np.float64)

# name: (body over X and the index i, the value in NumPy float64, its derivative in X)
CASES = {
    "one_minus_a_choice": (lambda X, i: (1.0 - ta.select(X[i] > 0, 11 / 12, 1 / 120)) * X[i],
                           lambda x: (1.0 - np.where(x > 0, 11 / 12, 1 / 120)) * x,
                           lambda x: 1.0 - np.where(x > 0, 11 / 12, 1 / 120)),
    "a_product_of_constants": (lambda X, i: ta.const(2.0) * 0.1 * X[i],
                               lambda x: 2.0 * 0.1 * x, lambda x: np.full_like(x, 2.0 * 0.1)),
    "a_square_root": (lambda X, i: ta.sqrt(2.0 / math.pi) * X[i],
                      lambda x: math.sqrt(2.0 / math.pi) * x,
                      lambda x: np.full_like(x, math.sqrt(2.0 / math.pi))),
    "a_quotient": (lambda X, i: X[i] * (ta.const(1.0) / 3.0),
                   lambda x: x * (1.0 / 3.0), lambda x: np.full_like(x, 1.0 / 3.0)),
    "an_index_value": (lambda X, i: (i * 0.1 + 0.3) * X[i],
                       lambda x: (IDX * 0.1 + 0.3) * x, lambda x: IDX * 0.1 + 0.3),
    "an_exponential": (lambda X, i: ta.exp(ta.const(0.1)) * ta.tanh(ta.const(0.7) - 0.2) + X[i] * X[i],
                       lambda x: math.exp(0.1) * math.tanh(0.7 - 0.2) + x * x, lambda x: 2 * x),
    "a_lazy_choice_on_the_index": (
        lambda X, i: X[i] / ta.if_then_else(i < 3, ta.const(3.0) * 0.7, ta.sin(ta.const(0.3))),
        lambda x: x / np.where(IDX < 3, 3.0 * 0.7, math.sin(0.3)),
        lambda x: 1 / np.where(IDX < 3, 3.0 * 0.7, math.sin(0.3))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_float_arithmetic_keeps_its_values_in_a_float64_program(name):
    body, value, slope = CASES[name]
    X = ta.placeholder((N,), "float64", "X")
    Y = ta.compute((N,), lambda i: body(X, i), "Y")
    H = ta.placeholder((N,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert Y.dtype == dX.dtype == "float64"
    y, dx = ta.build([Y, dX], [X, H])(XS, HS)
    np.testing.assert_allclose(y, value(XS), rtol=1e-15)
    np.testing.assert_allclose(dx, HS * slope(XS), rtol=1e-15)
    np.testing.assert_allclose(ta.evaluate(Y, {X: XS}), value(XS), rtol=1e-15)


def test_a_float32_program_rounds_each_python_float_once_to_float32():
    f = np.float32
    X = ta.placeholder((N,), "float32", "X")
    Y = ta.compute((N,), lambda i: (1.0 - ta.select(X[i] > 0, 11 / 12, 1 / 120)) * X[i]
                   + ta.sqrt(2.0 / math.pi), "Y")
    x = XS.astype(np.float32)
    want = (f(1.0) - np.where(x > 0, f(11 / 12), f(1 / 120))) * x + np.sqrt(f(2.0 / math.pi))
    assert want.dtype == np.float32
    np.testing.assert_array_equal(ta.build([Y], [X])(x), want)
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), want)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_a_half_program_computes_its_python_floats_in_float32(half):
    from tensorad.ir.dtype import numpy_dtype

    f = np.float32
    X = ta.placeholder((N,), half, "X")
    Y = ta.compute((N,), lambda i: (1.0 - ta.select(X[i] > 0, 11 / 12, 1 / 120)) * X[i], "Y",
                   dtype=half)
    x = XS.astype(numpy_dtype(half))
    want = ((f(1.0) - np.where(x > 0, f(11 / 12), f(1 / 120))) * x.astype(f)).astype(numpy_dtype(half))
    np.testing.assert_array_equal(ta.build([Y], [X])(x), want)


def test_an_explicit_float32_constant_holds_its_float32_value_in_a_float64_program():
    X = ta.placeholder((N,), "float64", "X")
    X32 = ta.placeholder((N,), "float32", "X32")
    Y = ta.compute((N,), lambda i: ta.const(0.1, "float32") * X[i] + X32[i] * 0.3, "Y")
    x32 = XS.astype(np.float32)
    want = np.float64(np.float32(0.1)) * XS + (x32 * np.float32(0.3)).astype(np.float64)
    np.testing.assert_allclose(ta.build([Y], [X, X32])(XS, x32), want, rtol=1e-15)
    np.testing.assert_allclose(ta.evaluate(Y, {X: XS, X32: x32}), want, rtol=1e-15)
