"""A convolution over a symbolic batch whose padded input is copied in chunks of the batch (the copy
would outgrow the kernel's arguments) runs exactly the rows it is given: each chunk's copy and product
run the rows of the count past the chunk's first, so no block reads rows past the caller's arrays (NaN
there) nor writes rows past its outputs (a sentinel there), and the weight gradient sums the real rows
only.  The blocks once refused a chunk's copy, and the last rows ran as one padded block.  The oracle is
the layer and its gradient written in NumPy, in float64."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _conv(n, stride):
    X, W = ta.placeholder((n, 3, 7, 7), name="X"), ta.placeholder((4, 3, 3, 3), name="W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, stride, 1))
    H = ta.placeholder(Y.shape, name="H")
    return Y, ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W]), [X, W, H]


def _numpy(x, w, h, stride):
    """``relu(conv2d(x, w, stride, 1))`` and the gradients of ``sum(Y * h)`` by ``x`` and ``w``."""
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    z = np.einsum("ncyxij,ocij->noyx", win, w)  # (n, c, ho, wo, 3, 3) windows times the taps
    g = h * (z > 0)
    ho, wo = z.shape[2:]
    dxp = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride] += \
                np.einsum("noyx,oc->ncyx", g, w[:, :, i, j])
    return np.maximum(z, 0.0), dxp[:, :, 1:-1, 1:-1], np.einsum("noyx,ncyxij->ocij", g, win)


@pytest.mark.slow
@pytest.mark.parametrize("stride", [1, 2])
def test_chunked_convolution_runs_exact_rows(stride):
    n = ta.size_var("n")
    Y, grads, (X, W, H) = _conv(n, stride)
    forward, backward = ta.build(Y, [X, W], microkernel=True), ta.build(grads, [X, W, H], microkernel=True)
    assert forward.generic and backward.generic and forward.why == backward.why == ""
    if stride == 1:  # (its padded input outgrows the output: copied in chunks of 32 rows)
        assert "padded32" in ta.lower(Y, [X, W], sizes={"n": 64}, microkernel=True).text
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    for size in (1, 2, 7, 17, 33, 64, 65):
        xs = np.full((size + 2, 3, 7, 7), np.nan, np.float32)
        xs[:size] = rng.standard_normal((size, 3, 7, 7))
        x = xs[:size]
        ys = np.full((size + 2, *Y.shape[1:]), 7.0, np.float32)
        forward(x, w, out=ys[:size])
        assert np.all(ys[size:] == 7.0)  # (no row past the count written)
        hs = np.full_like(ys, np.nan)
        hs[:size] = rng.standard_normal(ys[:size].shape)
        dx, dw = backward(x, w, hs[:size])
        want_y, want_dx, want_dw = _numpy(x, w.astype("float64"), hs[:size].astype("float64"), stride)
        np.testing.assert_allclose(ys[:size], want_y, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-3)  # (NaN had a padded row reached it)
