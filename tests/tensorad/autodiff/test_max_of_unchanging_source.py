"""A max or min whose source no reduction point changes (``max_k X[i]``) is its source: every point
ties, the head split evenly sums back whole, and the gradient is the head routed to the one element,
with no work per reduction point."""

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


@pytest.mark.parametrize("reduce", [ta.max, ta.min])
def test_gradient_of_max_over_unchanging_source_is_the_routed_head(reduce):
    X = ta.placeholder((3,), "float64", name="X")
    r, s = ta.reduce_axis((-1, 16), "r"), ta.reduce_axis((0, 4), "s")
    q = ta.reduce_axis((-1, 0), "q")  # (one point: what the source reads of it does not change)
    Y = ta.compute((3, 5), lambda i, j: reduce(X[i] * 2.0 + ta.cast("float64", q), axis=[r, s, q]), name="Y")
    H = ta.placeholder((3, 5), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x, h = np.array([0.5, -1.0, 2.0]), np.random.default_rng(0).uniform(-1, 1, (3, 5))
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), 2.0 * h.sum(1), rtol=1e-12)
    np.testing.assert_allclose(ta.build(g, [X, H])(x, h), 2.0 * h.sum(1), rtol=1e-12)
    assert ta.lower([g], [X, H], target=TARGET).work <= 3 * 5  # (the head's sum; not 3 * 5 * 68)


def test_max_over_unchanging_source_under_a_condition_on_outputs_only():
    """``where=j < 2`` reads no reduction point: the max is the source where it holds and the
    identity (-inf) elsewhere, whose derivative is zero."""
    X = ta.placeholder((3,), "float64", name="X")
    k = ta.reduce_axis((0, 6), "k")
    Y = ta.compute((3, 4), lambda i, j: ta.max(ta.exp(X[i]), axis=k, where=j < 2), name="Y")
    L = ta.compute((3, 4), lambda i, j: ta.if_then_else(j < 2, Y[i, j], 0.0), name="L")
    H = ta.placeholder((3, 4), "float64", name="H")
    (g,) = ta.JacobianRecursive(L, [X], H)
    x, h = np.array([0.1, 0.7, -0.4]), np.random.default_rng(1).uniform(-1, 1, (3, 4))
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), np.exp(x) * h[:, :2].sum(1), rtol=1e-12)
