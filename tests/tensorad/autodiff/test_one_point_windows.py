"""A max, min or product whose ``where`` leaves at most one point of the window per output is that
point's source (the identity where there is none): its gradient is the head routed to the element
read, a sum of one term that the optimizer solves, with no winner, tie count or tie routing."""

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"


@pytest.mark.parametrize("reduce", [ta.max, ta.min, ta.prod])
def test_window_cut_to_one_point_by_its_where_routes_the_head(reduce):
    """``where (i + k) % 4 == 1`` over ``k < 4`` holds at one ``k`` per row: ``Y[i, j]`` is
    ``X[(i + 2k) % 6, j]`` at that ``k``.  The gradient ran a winner pass, a tie count and a
    routing loop per window point (480 body runs); it is one store per output (30)."""
    X = ta.placeholder((6, 5), F64, name="X")
    k = ta.reduce_axis((0, 4), "k")
    Y = ta.compute((6, 5), lambda i, j: reduce(X[(i + 2 * k) % 6, j] * 3.0, k, where=(i + k) % 4 == 1),
                   name="Y")
    H = ta.placeholder(Y.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, H], target=TARGET).work <= 6 * 5

    rng = np.random.default_rng(0)
    x, h = rng.uniform(-1, 1, X.shape), rng.uniform(-1, 1, H.shape)
    want = np.zeros_like(x)
    for i in range(6):
        kk = (1 - i) % 4
        want[(i + 2 * kk) % 6] += 3.0 * h[i]
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
    assert ta.gradcheck(Y, [X])


def test_one_point_window_under_a_data_mask():
    """A mask read from data joins the window's condition: its points are a subset of one point."""
    X, M = ta.placeholder((6, 5), F64, name="X"), ta.placeholder((6,), F64, name="M")
    k = ta.reduce_axis((0, 4), "k")
    Y = ta.compute((6, 5), lambda i, j: ta.min(X[(i + 2 * k) % 6, j], k,
                                               where=((i + k) % 4 == 1) & (M[i] > 0)), name="Y")
    H = ta.placeholder(Y.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, M, H], target=TARGET).work <= 6 * 5
    assert ta.gradcheck(Y, [X], feed={M: np.array([1.0, -1.0, 1.0, 1.0, -1.0, 1.0])})

