"""A product with as few columns as one vector of the target (a single-channel convolution's
weight gradient: 16 filters x 9 taps over a long sum) is offered to the micro-kernel, and the
cost model takes it over the loops.  Oracle: NumPy's sum over the padded input's windows."""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_single_channel_conv_weight_gradient_is_a_matrix_product(rng):
    X = ta.placeholder((16, 1, 20, 20), "float32", "X")
    W = ta.placeholder((16, 1, 3, 3), "float32", "W")
    # 9 columns are one AVX2 vector
    f = ta.function(ta.topi.nn.conv2d(X, W, 1, 1), [X, W], wrt=[W], target="llvm -mcpu=haswell")
    chosen = {point.split("#")[0]: label for point, _, label in f.lower_backward().offered}
    assert chosen["W.grad"] in ("microkernel", "padded", "split-k")
    x = rng.normal(size=X.shape).astype(np.float32)
    h = rng.normal(size=(16, 16, 20, 20)).astype(np.float32)
    (gw,) = f.backward(f.forward(x, rng.normal(size=W.shape).astype(np.float32))[1], h)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros(W.shape)
    for ry in range(3):
        for rx in range(3):
            want[:, 0, ry, rx] = np.einsum("nfyx,nyx->f", h, xp[:, 0, ry:ry + 20, rx:rx + 20])
    np.testing.assert_allclose(gw, want, rtol=1e-4, atol=1e-3)
