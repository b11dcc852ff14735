"""The reverse gradient of a reduction over an empty box is zero.

``reduce_axis((2, 2))`` has no point: the reduction is its identity (``-inf`` for ``max``),
constant in the data.  Reverse mode built the winner of a selecting reducer (max, min, a custom
argmax or max-magnitude combiner) anyway: its sentinel index, clipped into the box's range,
named the point ``r = lo``, whose (true) condition let the term through, so ``X[i, lo]`` got
``H / 0`` ties (``inf``) from a max and ``H`` from an argmax -- an element the reduction never
read.  The oracle is the derivative of a constant, zero, and float64 central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _argmax_combine(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax_combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                         name="argmax")
MAXABS = ta.comm_reducer(lambda x, y: ta.select(ta.abs(x) >= ta.abs(y), x, y), lambda t: ta.const(0, t),
                         name="maxabs")

BODIES = {
    "max": lambda X, r, s: ta.max(X[r, s], axis=[r, s]),
    "min": lambda X, r, s: ta.min(X[r, s] * 2.0, axis=[r, s]),
    "argmax": lambda X, r, s: ARGMAX((r * 3 + s, X[r, s]), axis=[r, s])[1],
    "maxabs": lambda X, r, s: MAXABS(X[r, s], axis=[r, s]),
    "prod": lambda X, r, s: ta.prod(X[r, s], axis=[r, s]),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("rdom, sdom", [((2, 2), (0, 3)), ((0, 4), (1, 1))])
def test_gradient_of_a_reduction_over_no_point_is_zero(kind, rdom, sdom):
    X = ta.placeholder((4, 3), "float64", name="X")
    r, s = ta.reduce_axis(rdom, name="r"), ta.reduce_axis(sdom, name="s")
    # a plain term beside it, so the gradient is not the zero tensor of an unread input
    y = ta.compute((2,), lambda i: BODIES[kind](X, r, s) * 0.0 + X[i, 0] * 3.0, name="y")
    h = ta.placeholder((2,), "float64", name="h")
    (g,) = ta.JacobianRecursive(y, [X], h)
    x = np.random.default_rng(0).standard_normal((4, 3))
    hv = np.array([1.5, -0.5])
    want = np.zeros((4, 3))
    want[:2, 0] = 3.0 * hv
    got = np.asarray(ta.build([g], [X, h])(x, hv))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(ta.evaluate([g], {X: x, h: hv})[0]), want)


def test_matches_central_differences():
    X = ta.placeholder((4, 3), "float64", name="X")
    r = ta.reduce_axis((3, 3), name="r")
    y = ta.compute((4,), lambda i: ta.maximum(ta.max(X[i, r - 1], axis=[r]), X[i, 1]), name="y")
    h = ta.placeholder((4,), "float64", name="h")
    (g,) = ta.JacobianRecursive(y, [X], h)
    x = np.random.default_rng(1).standard_normal((4, 3))
    hv = np.random.default_rng(2).standard_normal(4)
    f = ta.build([y], [X])
    fd = np.zeros((4, 3))
    for k in np.ndindex(4, 3):
        e = np.zeros((4, 3))
        e[k] = 1e-6
        fd[k] = hv @ (np.asarray(f(x + e)) - np.asarray(f(x - e))) / 2e-6
    got = np.asarray(ta.build([g], [X, h])(x, hv))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, fd, atol=1e-8)
