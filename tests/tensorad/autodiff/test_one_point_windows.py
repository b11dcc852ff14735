"""A max, min or product whose ``where`` leaves at most one point of the window per output is that
point's source (the identity where there is none): its gradient is the head routed to the element
read, a sum of one term that the optimizer solves, with no winner, tie count or tie routing.  A
max read by another op of the gradient (a ReLU after it) is found with its tie code in one pass
over the window, and the ReLU's derivative reads that pass's value."""

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


def test_relu_of_a_max_finds_the_maximum_and_its_ties_in_one_pass():
    """``relu(max_k X[b, k, j])``: the ReLU's derivative reads the max.  The max and the tie code
    came from two passes over the window (B*K*J each); one pass gives both, and the gradient is
    that pass, the lone winner's scatter per output and the tied points' routing (counted as
    taken): 2*B*K*J + 2*B*J, as for the max alone."""
    b, n, d = 3, 7, 5
    X = ta.placeholder((b, n, d), F64, name="X")
    k = ta.reduce_axis((0, n), "k")
    M = ta.compute((b, d), lambda p, j: ta.max(X[p, k, j], k), name="M")
    Y = ta.compute((b, d), lambda p, j: ta.maximum(M[p, j], 0.0), name="Y")
    H = ta.placeholder(Y.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, H], target=TARGET).work <= 2 * b * n * d + 2 * b * d

    rng = np.random.default_rng(1)
    x, h = rng.uniform(-1, 1, X.shape), rng.uniform(-1, 1, H.shape)
    x[0, :, 0] = -0.5  # every point tied, the max below zero: no gradient
    x[1, 2, 1] = x[1, 5, 1] = 2.0  # two tied winners share the head
    m = x.max(axis=1)
    share = (x == m[:, None, :]) / (x == m[:, None, :]).sum(axis=1, keepdims=True)
    want = share * (h * (m > 0))[:, None, :]
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
