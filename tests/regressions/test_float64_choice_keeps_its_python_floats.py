"""A choice between two Python floats, ``select(X[i] > 0, 11/12, 1/120) * X[i]`` over a float64 ``X``:
its branches are float32 constants (a Python float with no other operand is float32), and the product
widened the choice as a whole, so the float64 program computed with ``0.90833336`` and ``0.008333334``.
A choice of Python floats is weak now (``test_python_float_arithmetic_keeps_float64``): it takes the
float64 of the product, and each constant keeps the Python value it was written with, as NumPy and JAX
keep a Python scalar's value in a float64 computation.

Oracles: the NumPy formula in float64; ``ta.evaluate``."""

import numpy as np
import pytest

import tensorad as ta

HI, LO = 1.0 - 0.1 + 0.1 / 12, 0.1 / 12


@pytest.mark.parametrize("choose", [ta.select, ta.if_then_else])
def test_a_choice_of_python_floats_keeps_their_values_in_a_float64_program(choose):
    X = ta.placeholder((5,), "float64", "X")
    Y = ta.compute((5,), lambda i: choose(X[i] > 0, HI, choose(X[i] < -1, -HI, LO)) * X[i], "Y")
    H = ta.placeholder((5,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    x = np.array([1.5, -0.25, 2.0, -3.0, 0.7])
    h = np.array([0.3, -1.1, 2.0, 0.5, 1.0])
    scale = np.where(x > 0, HI, np.where(x < -1, -HI, LO))
    y, dx = ta.build([Y, dX], [X, H])(x, h)
    np.testing.assert_allclose(y, scale * x, rtol=1e-15)
    np.testing.assert_allclose(dx, scale * h, rtol=1e-15)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), scale * x, rtol=1e-15)


def test_a_float32_choice_still_rounds_its_constants():
    X = ta.placeholder((2,), "float32", "X")
    Y = ta.compute((2,), lambda i: ta.select(X[i] > 0, HI, LO) * X[i], "Y")
    y = ta.build([Y], [X])(np.array([1.0, -1.0], np.float32))
    np.testing.assert_array_equal(y, np.array([np.float32(HI), -np.float32(LO)], np.float32))
