"""A reduction nested in another's source may read the outer reduction's axis.

``sum_k A[k, i] * sum_j A[k, j]`` is well defined: the inner sum is a function of ``k``.  The
language lifts a nested reduction into a tensor of its own, and that tensor was indexed by the
compute's axes only, so an inner reduction that read ``k`` was rejected at definition with a
misleading ``OutOfBoundsError`` ("r0 is not an index variable here").  Now each outer reduce
axis the inner one reads is one more axis of the lifted tensor.  Oracles: loops in NumPy, and
float64 central differences for the gradient and the jvp.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _program():
    X = ta.placeholder((4, 5), "float64", name="X")
    k = ta.reduce_axis((-1, 3), name="k")  # an outer axis that starts below zero
    j = ta.reduce_axis((0, 5), name="j")
    m = ta.reduce_axis((0, 3), name="m")
    # three deep: the max reads k and j, the middle sum reads k (and its where does too)
    inner = lambda i: ta.sum(X[k + 1, j] * ta.max(X[(k + 1 + m) % 4, j], axis=[m]),  # noqa: E731
                             axis=[j], where=j != k + 1)
    Y = ta.compute((5,), lambda i: ta.sum(X[k + 1, i] * inner(i), axis=[k]) * 0.5 + X[0, i], name="Y")
    return X, Y


def _numpy(x):
    out = np.zeros(5)
    for i in range(5):
        total = 0.0
        for a in range(4):
            inner = sum(x[a, b] * max(x[(a + c) % 4, b] for c in range(3)) for b in range(5) if b != a)
            total += x[a, i] * inner
        out[i] = total * 0.5 + x[0, i]
    return out


def test_forward_matches_numpy():
    X, Y = _program()
    x = np.random.default_rng(0).standard_normal((4, 5))
    np.testing.assert_allclose(np.asarray(ta.evaluate(Y, {X: x})), _numpy(x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ta.build([Y], [X])(x)), _numpy(x), rtol=1e-12)


def test_gradient_and_jvp_match_central_differences():
    X, Y = _program()
    rng = np.random.default_rng(1)
    x, h, u = rng.standard_normal((4, 5)), rng.standard_normal(5), rng.standard_normal((4, 5))
    H = ta.placeholder((5,), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    got = np.asarray(ta.build([g], [X, H])(x, h))
    eps = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        fd[idx] = h @ (_numpy(x + e) - _numpy(x - e)) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)
    U = ta.placeholder((4, 5), "float64", name="U")
    t = ta.jvp(Y, [X], [U])
    want = (_numpy(x + eps * u) - _numpy(x - eps * u)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(ta.build([t], [X, U])(x, u)), want, rtol=1e-6, atol=1e-7)


def test_argmax_over_an_inner_sum_per_outer_point():
    """A two-output reducer outside, a sum inside that reads its axis."""
    X = ta.placeholder((3, 4), "float64", name="X")
    k, j = ta.reduce_axis((0, 3), name="k"), ta.reduce_axis((0, 4), name="j")
    argmax = ta.comm_reducer(
        lambda a, b: (ta.select(a[1] >= b[1], a[0], b[0]), ta.select(a[1] >= b[1], a[1], b[1])),
        lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
    idx, val = ta.compute((2,), lambda i: argmax((k, ta.sum(X[k, j] * (i + 1), axis=[j])), axis=[k]),
                          name="A")
    x = np.array([[1.0, 2.0, 0.0, 0.5], [3.0, -1.0, 2.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    sums = x.sum(axis=1)
    got_i, got_v = ta.build([idx, val], [X])(x)
    np.testing.assert_array_equal(np.asarray(got_i), [np.argmax(sums)] * 2)
    np.testing.assert_allclose(np.asarray(got_v), [sums.max(), 2 * sums.max()])


def test_an_outer_axis_read_outside_its_reduction_is_named():
    X = ta.placeholder((4, 5), name="X")
    k, j = ta.reduce_axis((0, 4), name="k"), ta.reduce_axis((0, 5), name="j")
    with pytest.raises(ValueError, match="'k' is neither an axis"):
        ta.compute((5,), lambda i: ta.sum(X[k, i], axis=[k]) + ta.sum(X[k, j], axis=[j]), name="Z")
