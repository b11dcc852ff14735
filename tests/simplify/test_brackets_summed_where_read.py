"""A bracket read once, whole, by a tensor that is only that read (or that read where a condition
holds and 0 elsewhere) is summed where it is read: an ``Lp`` pool's input gradient is one sum over
the window in the input's own layout, not a sum in the bracket's axis order and a transposing copy.

Work counts on a pinned target; values against float64 central differences of a NumPy pool."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


def _lp_pool(n, c, h, k, st, dtype="float32"):
    oh = (h - k) // st + 1
    X = ta.placeholder((n, c, h, h), dtype, name="X")
    r, s = ta.reduce_axis((0, k), "r"), ta.reduce_axis((0, k), "s")
    Y = ta.compute((n, c, oh, oh), lambda b, q, y, x: ta.sqrt(ta.sum(
        X[b, q, y * st + r, x * st + s] * X[b, q, y * st + r, x * st + s], axis=[r, s])), name="Y")
    H = ta.placeholder(Y.shape, dtype, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    return X, Y, H, dX


def _pool(x, k, st):
    n, c, h, _ = x.shape
    oh = (h - k) // st + 1
    out = np.zeros((n, c, oh, oh))
    for r in range(k):
        for s in range(k):
            out += x[:, :, r:r + st * oh:st, s:s + st * oh:st] ** 2
    return np.sqrt(out)


@pytest.mark.parametrize("h", [33, 56])  # (56: the last row and column are in no window)
def test_lp_pool_gradient_is_one_sum_in_the_inputs_layout(h):
    n, c, k, st = 2, 8, 3, 2
    X, Y, H, dX = _lp_pool(n, c, h, k, st)
    low = ta.lower([dX], [X, H], target=TARGET)
    out = n * c * ((h - k) // st + 1) ** 2
    assert low.work == 2 * k * k * out, low  # the forward's sums, then one term a window tap
    assert "allocate" not in str(low).split("# nest X.grad")[1]


@pytest.mark.parametrize("h", [7, 8])
def test_lp_pool_gradient_values(h):
    n, c, k, st = 1, 2, 3, 2
    X, Y, H, dX = _lp_pool(n, c, h, k, st, "float64")
    rng = np.random.default_rng(h)
    x = rng.random((n, c, h, h)) + 0.5
    head = rng.standard_normal(Y.shape)
    got = ta.build([dX], [X, H])(x, head)
    want = np.zeros_like(x)
    eps = 1e-6
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        want[i] = np.sum(head * (_pool(x + d, k, st) - _pool(x - d, k, st))) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
