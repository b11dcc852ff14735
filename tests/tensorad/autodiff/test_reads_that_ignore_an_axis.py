"""A max, min or product whose reads name a variable they do not change along (``X[(3 * s + i) % 3]``
is ``X[i % 3]`` over every ``s``) repeats along it: isl proves each read index unchanged, the read is
written at the variable's first value, and the gradient sums the head over the copies (a reduction
axis: one point, a product's head scaled by ``n Y^(n-1)``) instead of routing over each of them."""

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


@pytest.mark.parametrize("reduce", [ta.min, ta.prod])
def test_reduction_over_an_axis_a_read_cancels(reduce, numeric_grad):
    """``s`` enters the read only as ``3 * s`` under ``% 3``: the window is 5 points of ``r`` per
    output, not 5 x 16 (a random program's gradient: 7,877 work against a bound of 4,970)."""
    X = ta.placeholder((3, 5), "float64", name="X")
    r, s = ta.reduce_axis((0, 5), "r"), ta.reduce_axis((-1, 15), "s")
    Y = ta.compute((6, 2), lambda i, c: reduce(X[(3 * s + i) % 3, r] * (1.0 + ta.cast("float64", c)),
                                                axis=[r, s]), name="Y")
    H = ta.placeholder((6, 2), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(4)
    x, h = rng.uniform(0.9, 1.1, (3, 5)), rng.uniform(-1, 1, (6, 2))
    (want,) = numeric_grad(lambda a: ta.evaluate(Y, {X: a}), [x], head=h)
    np.testing.assert_allclose(ta.build(g, [X, H])(x, h), want, rtol=1e-6)
    # a few passes over the 6 x 2 outputs' 5 points each (the winner or the zero count, the routing),
    # none over the 16 copies of each point (one pass over those alone is 6 x 2 x 5 x 16 = 960)
    assert ta.lower([g], [X, H], target=TARGET).work <= 4 * 6 * 2 * 5
