"""Max-unpooling, ``Y[q, i, j] = X[q, i // s, j // s]`` where ``at[q, i // s, j // s] == s * (i % s) + j % s``
(the window point each pooled value came from, a data-given code): each element of ``X`` lands on one
point, so its gradient reads ``H`` there, once per element of ``X``.  The adjoint's sum over the window's
points ``(a, b)`` kept the data test ``at == s * a + b`` as a residual condition (an equation in two
variables), a pass over every window point (4x at ``s = 2``).  The optimizer now solves such an equation
with the data as one more isl variable: ``a = at // s``, ``b = at % s`` where ``0 <= at < s * s``.

Oracles: float64 central differences of the NumPy formula (codes outside the window read nothing);
``ta.evaluate``."""

import numpy as np
import pytest

import tensorad as ta

C, H_, W_ = 2, 3, 4


def _unpool(x, at, s):
    y = np.zeros((C, s * H_, s * W_))
    for q, i, j in np.ndindex(x.shape):
        if 0 <= at[q, i, j] < s * s:
            y[q, s * i + at[q, i, j] // s, s * j + at[q, i, j] % s] = x[q, i, j]
    return y


@pytest.mark.parametrize("s", [2, 3])
def test_unpooling_gradient_reads_the_head_once_per_element(s):
    X, at = ta.placeholder((C, H_, W_), "float64", "X"), ta.placeholder((C, H_, W_), "int32", "at")
    Y = ta.compute((C, s * H_, s * W_), lambda q, i, j: ta.select(
        at[q, i // s, j // s] == s * (i % s) + j % s, X[q, i // s, j // s], 0.0), name="Y")
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [at, H], target="llvm -mcpu=haswell").work == C * H_ * W_
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal(X.shape), rng.standard_normal(Y.shape)
    codes = rng.integers(-1, s * s + 1, X.shape).astype(np.int32)  # (-1 and s * s: no point)
    eps = 1e-6
    want = np.zeros(X.shape)
    for idx in np.ndindex(X.shape):
        e = np.zeros(X.shape)
        e[idx] = eps
        want[idx] = ((_unpool(x + e, codes, s) - _unpool(x - e, codes, s)) * h).sum() / (2 * eps)
    np.testing.assert_allclose(ta.build([dX], [at, H])(codes, h), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ta.evaluate(dX, {at: codes, H: h}), want, rtol=1e-7, atol=1e-9)
