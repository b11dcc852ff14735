"""A tensor read at a strided or wrapped slice, or at scattered points, is computed near the points read.

``Y[n] = P[n + 2, (3 n + 1) % 6]`` reads columns 1 and 4 of ``P``, rows 2 to 5. That footprint needs a
division to describe (``j = 1 + 3e``), and a footprint with divisions was dropped, so ``P`` was computed on
its whole box: the forward did 48 products where 16 suffice, and a gradient that recomputes such a tensor for
its ties (a max read through a wrapped index) did the same over the whole input. Such a footprint is now taken
as its bounding box. Likewise a footprint of more than two convex pieces (three points) was dropped; it is now
taken as their convex hull. Oracles: a hand count of the work, a NumPy formula and float64 central
differences."""

from __future__ import annotations

import numpy as np

import tensorad as ta
from fuzz.cheap import pinned

TARGET = pinned("llvm -mcpu=skylake-avx512")


def _program():
    x = ta.placeholder((8, 6), "float64", "x")
    r = ta.reduce_axis((0, 5), "r")
    P = ta.compute((8, 6), lambda i, j: ta.prod(x[i, j] + ta.cast("float64", r), axis=r), name="P")
    Y = ta.compute((4,), lambda n: P[n + 2, (3 * n + 1) % 6] * x[n, 0], name="Y")
    return x, Y


def _numpy(xv):
    n = np.arange(4)
    return np.prod(xv[n + 2, (3 * n + 1) % 6][:, None] + np.arange(5.0), axis=1) * xv[n, 0]


def test_only_the_bounding_box_of_the_read_columns_is_computed():
    x, Y = _program()
    # P over rows 2..5 and columns 1..4 (the box of {1, 4}), 5 terms each, then Y's 4 points
    assert ta.lower([Y], [x], target=TARGET).work == 4 * 4 * 5 + 4


def test_values_and_gradient():
    x, Y = _program()
    xv = np.random.default_rng(5).standard_normal((8, 6))
    np.testing.assert_allclose(ta.build([Y], [x])(xv), _numpy(xv), rtol=1e-13)
    H = ta.placeholder((4,), "float64", "H")
    (dx,) = ta.JacobianRecursive(Y, [x], H)
    hv = np.random.default_rng(6).standard_normal(4)
    got = ta.build([dx], [x, H])(xv, hv)
    want = np.zeros_like(xv)
    eps = 1e-6
    for idx in np.ndindex(*xv.shape):
        e = np.zeros_like(xv)
        e[idx] = eps
        want[idx] = hv @ (_numpy(xv + e) - _numpy(xv - e)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_scattered_points_are_computed_on_their_convex_hull():
    x = ta.placeholder((8, 6), "float64", "x")
    r = ta.reduce_axis((0, 5), "r")
    P = ta.compute((8, 6), lambda i, j: ta.prod(x[i, j] + ta.cast("float64", r), axis=r), name="P")
    Y = ta.compute((), lambda: P[0, 0] + P[0, 2] * P[2, 0], name="Y")
    # P on the triangle i, j >= 0, i + j <= 2 (6 points, the hull of the 3 read), 5 terms each; Y once
    assert ta.lower([Y], [x], target=TARGET).work == 6 * 5 + 1
    xv = np.random.default_rng(8).standard_normal((8, 6))
    p = np.prod(xv[:, :, None] + np.arange(5.0), axis=2)
    np.testing.assert_allclose(ta.build([Y], [x])(xv), p[0, 0] + p[0, 2] * p[2, 0], rtol=1e-13)
