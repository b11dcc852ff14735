"""An affine equality that a sum's plan makes affine is lifted out of the conjunction it sits in.

A sum's condition ``A && B``, ``A`` affine and ``B`` anything (a comparison of data), is
solved on ``A`` alone: ``sum_r [r == f(o) && B(o, r)] g(o, r)`` is the one point
``[lo <= f(o) < hi] [B(o, f(o))] g(o, f(o))``.  The optimizer split the conjunction only as the
sum came: a conjunct that was not affine then -- an equation holding an opaque index, or a
product of two variables -- stayed in the guard beside the data tests, even when eliminating a
variable of one point made it affine (``h == 2*i + 2*data_index(t, 1)`` is ``h == 2*i`` once
``t := 0``).  Each output then summed over every value of the variable it fixed.

The gradient of a max pool with a 1 x 1 window paid that in its tie term: a sum over every
window row for each input row, 4 to 25 times the work of the forward.  The plan's substitution
is applied to the conjuncts left out, and the sum is solved again when one of them became
affine.  (A one-point max differentiates as its source, with no tie term at all,
``tests/simplify/test_hand_work_gaps.py``; the pool stays here for its work bound and oracles.)

Oracles: the pool's gradient as a NumPy formula (a 1 x 1 window routes the head to the one
element it reads, whatever the values: repeated values and NaN included) and float64 central
differences; the other program's gradient as a NumPy formula and central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

N, C, HEIGHT, WIDTH = 2, 3, 9, 8


def _pool_1x1(stride: int, dilation: int):
    """``Y[b, c, y, x] = max over a 1 x 1 window of X[b, c, y*stride + ry*dilation, ...]``."""
    X = ta.placeholder((N, C, HEIGHT, WIDTH), "float64", name="X")
    oh, ow = (HEIGHT - 1) // stride + 1, (WIDTH - 1) // stride + 1
    ry, rx = ta.reduce_axis((0, 1), "ry"), ta.reduce_axis((0, 1), "rx")
    Y = ta.compute((N, C, oh, ow), lambda b, c, y, x: ta.max(
        X[b, c, y * stride + ry * dilation, x * stride + rx * dilation], [ry, rx]), name="maxpool")
    return X, Y


def _pool_forward(x: np.ndarray, stride: int) -> np.ndarray:
    return x[:, :, ::stride, ::stride]


def _pool_gradient(x: np.ndarray, h: np.ndarray, stride: int) -> np.ndarray:
    """Each output reads one element: the head goes there, every other element gets 0."""
    dx = np.zeros_like(x)
    dx[:, :, ::stride, ::stride] = h
    return dx


@pytest.mark.parametrize("stride,dilation", [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)])
def test_max_pool_1x1_gradient_work_and_values(stride, dilation, numeric_grad):
    X, Y = _pool_1x1(stride, dilation)
    H = ta.placeholder(Y.shape, "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    outputs, inputs = int(np.prod(Y.shape)), int(np.prod(X.shape))
    # the forward's max (one point per output), the tie count beside it, the head's scatter to
    # the winners, and one pass over the input that adds the tie term (a test per element)
    bound = 3 * outputs + inputs
    work = ta.lower([dX], [X, H]).work
    assert work <= bound, f"gradient work {work} > {bound}: a sum over window rows per input row"

    kernel = ta.build([dX], [X, H])
    rng = np.random.default_rng(2)
    h = rng.standard_normal(Y.shape)
    ties = rng.integers(0, 3, X.shape).astype(np.float64)  # many equal values, within rows too
    with_nan = ties.copy()
    with_nan[0, 1, 0, 0] = with_nan[1, 2, stride, stride] = np.nan
    for x in (rng.standard_normal(X.shape), ties, with_nan):
        np.testing.assert_allclose(kernel(x, h), _pool_gradient(x, h, stride), rtol=1e-12, atol=0)
    (fd,) = numeric_grad(lambda a: _pool_forward(a, stride), [ties], head=h)
    np.testing.assert_allclose(kernel(ties, h), fd, rtol=1e-7, atol=1e-9)


M = 12


def _gated_diagonal(one_point: bool):
    """``Z[i, j] = sum over k (and g) where k == j [+ g*i] && X[k] > W[i, j] of W[i, k] * X[k]``.

    With ``one_point`` the equation holds a product ``g * i`` of a one-point reduction variable
    and an axis, which is not affine until the plan fixes ``g := 0``; without it the equation is
    affine as written."""
    X = ta.placeholder((M,), "float64", name="X")
    W = ta.placeholder((M, M), "float64", name="W")
    k = ta.reduce_axis((0, M), "k")
    if one_point:
        g = ta.reduce_axis((0, 1), "g")
        Z = ta.compute((M, M), lambda i, j: ta.sum(
            W[i, k] * X[k], [k, g], where=(k == j + g * i) & (X[k] > W[i, j])), name="Z")
    else:
        Z = ta.compute((M, M), lambda i, j: ta.sum(
            W[i, k] * X[k], k, where=(k == j) & (X[k] > W[i, j])), name="Z")
    return X, W, Z


def _gated_forward(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.where(x[None, :] > w, w * x[None, :], 0.0)


@pytest.mark.parametrize("one_point", [False, True], ids=["affine", "affine_once_substituted"])
def test_sum_under_an_equality_and_a_data_test_is_one_point(one_point, numeric_grad):
    X, W, Z = _gated_diagonal(one_point)
    H = ta.placeholder(Z.shape, "float64", name="H")
    dX, dW = ta.JacobianRecursive(Z, [X, W], H)
    # dX[k] = sum_i H[i, k] [X[k] > W[i, k]] W[i, k] (M per element), dW[i, k] one term each
    bound = 2 * M * M
    work = ta.lower([dX, dW], [X, W, H]).work
    assert work <= bound, f"gradient work {work} > {bound}: the sum over j kept beside the data test"

    rng = np.random.default_rng(4)
    x, w, h = rng.standard_normal(M), rng.standard_normal((M, M)), rng.standard_normal((M, M))
    gate = x[None, :] > w
    want_dx = (h * gate * w).sum(axis=0)
    want_dw = h * gate * x[None, :]
    got_dx, got_dw = ta.build([dX, dW], [X, W, H])(x, w, h)
    np.testing.assert_allclose(got_dx, want_dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_dw, want_dw, rtol=1e-12, atol=1e-12)
    fd_x, fd_w = numeric_grad(_gated_forward, [x, w], head=h)
    np.testing.assert_allclose(got_dx, fd_x, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(got_dw, fd_w, rtol=1e-7, atol=1e-9)
    (z,) = [ta.build([Z], [X, W])(x, w)]
    np.testing.assert_allclose(z, _gated_forward(x, w), rtol=1e-12, atol=0)
