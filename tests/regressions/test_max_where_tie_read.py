"""A max whose ``where`` keeps its reads in bounds: ``max_r X[b, 3i + r - 1]`` where
``1 <= 3i + r <= 17`` (a padded 1-D pool written with ``where=``, not ``if_then_else``).  Its
gradient's tie term compared the source at every window point ``t`` with the maximum, and
``&&`` evaluates both sides, so the read at ``t`` ran where the ``where`` is false: ``ta.build``
of the gradient raised ``OutOfBoundsError``.  The
comparison is now lazy under the reduction's own condition.  Oracle: NumPy, ties sharing the
head equally (docs/conventions.md)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _program():
    X = ta.placeholder((2, 18), "float64", name="X")
    r = ta.reduce_axis((0, 3), "r")
    Y = ta.compute((2, 6), lambda b, i: ta.max(X[b, 3 * i + r - 1], axis=r,
                                               where=(3 * i + r >= 1) & (3 * i + r <= 17)), name="Y")
    return X, Y


def _want(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    for b in range(2):
        for i in range(6):
            cols = [3 * i + r - 1 for r in range(3) if 1 <= 3 * i + r <= 17]
            best = max(x[b, c] for c in cols)
            tied = [c for c in cols if x[b, c] == best]
            for c in tied:
                g[b, c] += h[b, i] / len(tied)
    return g


@pytest.mark.parametrize("ties", [False, True])
def test_gradient_of_a_max_under_where_builds_and_is_right(ties):
    X, Y = _program()
    H = ta.placeholder((2, 6), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 18))
    if ties:
        x = np.round(x)  # many windows tie
    h = rng.standard_normal((2, 6))
    want = _want(x, h)
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.build([g], [X, H], checked=True)(x, h), want, rtol=1e-12, atol=1e-12)
    fn = ta.function([Y], [X])
    _, res = fn.forward(x)
    (got,) = fn.backward(res, h)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
