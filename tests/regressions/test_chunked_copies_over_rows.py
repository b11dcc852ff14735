"""A convolution over a symbolic batch whose padded input is copied in chunks of the batch (the copy
would outgrow the kernel's arguments) runs exactly the rows it is given: each chunk's copy and product
run the rows of the count past the chunk's first, so no block reads rows past the caller's arrays (NaN
there) nor writes rows past its outputs (a sentinel there), and the weight gradient sums the real rows
only.  The blocks once refused a chunk's copy, and the last rows ran as one padded block.  The oracle is
``ta.evaluate`` in float64 of the static program."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _conv(n, stride):
    X, W = ta.placeholder((n, 3, 7, 7), name="X"), ta.placeholder((4, 3, 3, 3), name="W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, stride, 1))
    H = ta.placeholder(Y.shape, name="H")
    return Y, ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W]), [X, W, H]


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
        sy, sgrads, (sx, sw, sh) = _conv(size, stride)
        feed = {sx: x.astype("float64"), sw: w.astype("float64"), sh: hs[:size].astype("float64")}
        np.testing.assert_allclose(ys[:size], ta.evaluate(sy, feed), rtol=1e-4, atol=1e-4)
        want_dx, want_dw = ta.evaluate(sgrads, feed)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-3)  # (NaN had a padded row reached it)
