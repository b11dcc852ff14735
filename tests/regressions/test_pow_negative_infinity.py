"""``pow(-inf, 0.5)`` is +inf in C (and in compiled kernels), but NumPy's ``np.power`` takes a
square-root shortcut for the exponent 0.5 on some array shapes and returns NaN: ``ta.evaluate``
and ``ta.build`` disagreed on an empty ``max`` (-inf) raised to 0.5."""

from __future__ import annotations

import math

import numpy as np

import tensorad as ta


def test_pow_of_negative_infinity_is_c_pow_in_evaluate_and_build():
    x = np.array([-np.inf, -np.inf, -np.inf, -np.inf, 4.0, -np.inf])
    y = np.array([0.5, 3.0, -3.0, -0.5, 0.5, 2.0])
    want = np.array([math.pow(a, b) for a, b in zip(x, y)])  # C's pow
    X = ta.placeholder((6,), "float64", "X")
    Y = ta.placeholder((6,), "float64", "Y")
    Z = ta.compute((6,), lambda i: X[i] ** Y[i], name="Z")
    for got in (ta.evaluate(Z, {X: x, Y: y}), ta.build([Z], [X, Y])(x, y)):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_empty_max_to_the_half_agrees():
    r = ta.reduce_axis((0, 4), "r")
    X = ta.placeholder((4,), "float64", "X")
    Z = ta.compute((3,), lambda i: ta.power(ta.max(X[r], axis=r, where=r > 9), 0.5), name="Z")
    x = np.arange(4.0)
    ev = np.asarray(ta.evaluate(Z, {X: x}))
    np.testing.assert_array_equal(ev, np.full(3, np.inf))
    np.testing.assert_array_equal(np.asarray(ta.build([Z], [X])(x)), ev)
