"""A user's ``0.0 / x`` at ``x = 0`` feeding a comparison.

The optimizer read a literal zero as a strong zero (``0 / x -> 0``), so where ``x == 0`` the
comparison ``0 / x > y`` saw ``0 > y`` in optimized code and ``NaN > y`` (false) in
``ta.evaluate`` and plain builds: a select took the other branch and optimized code gave a
different *finite* answer, in the forward (``OptimizeAndLiftNonzeronessConditions``) and in
the gradient, whose mask recomputes the comparison.  Every algebraic rule is now exact at inf
and NaN (simplify/algebra/rules.py; docs/conventions.md).  Oracle: NumPy formulas in the test.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _program():
    x = ta.placeholder((6,), "float64", name="x")
    y = ta.placeholder((6,), "float64", name="y")
    Y = ta.compute((6,), lambda i: ta.select(0.0 / x[i] > y[i], 0.0 / x[i], y[i]), name="Y")
    return x, y, Y


def _data():
    x = np.array([0.0, 1.0, 0.0, -2.0, np.inf, 3.0])
    y = np.array([-1.0, -1.0, 2.0, 0.5, -3.0, -0.25])
    return x, y


def test_optimized_forward_takes_the_branch_evaluate_takes():
    x, y, Y = _program()
    xv, yv = _data()
    with np.errstate(all="ignore"):
        q = 0.0 / xv
        want = np.where(q > yv, q, yv)  # NaN > y is false: y where x == 0
    got_opt, got = ta.evaluate([ta.OptimizeAndLiftNonzeronessConditions(Y), Y], {x: xv, y: yv})
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_opt, want)
    np.testing.assert_array_equal(ta.build([Y], [x, y])(xv, yv), want)


def test_optimized_gradient_takes_the_branch_the_forward_took():
    x, y, Y = _program()
    H = ta.placeholder((6,), "float64", name="H")
    (gy,) = ta.JacobianRecursive(Y, [y], H)
    (raw,) = ta.JacobianRecursive(Y, [y], H, optimize=False)
    xv, yv = _data()
    hv = np.arange(1.0, 7.0)
    with np.errstate(all="ignore"):
        want = np.where(0.0 / xv > yv, 0.0, hv)  # dY/dy = 1 where the forward took y
    feed = {x: xv, y: yv, H: hv}
    np.testing.assert_array_equal(ta.evaluate([gy], feed)[0], want)
    np.testing.assert_array_equal(ta.evaluate([raw], feed)[0], want)
    np.testing.assert_array_equal(ta.build([gy], [x, y, H])(xv, yv, hv), want)
