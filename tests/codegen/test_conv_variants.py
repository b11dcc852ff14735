"""Convolution variants beyond the ResNet 3x3 (the ``convs`` benchmark suite): the strategy each
gradient takes, and its values.

* the input gradient of a strided convolution on few input channels (a ResNet stem, RGB) is
  one matrix product per residue class (parity), though each has only 3 rows;

Oracles: float64 NumPy convolutions and their adjoints written here (window by window), at odd
sizes, 1 and 2 threads, on the host and on ``-mcpu=haswell``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGETS = ("llvm", "llvm -mcpu=haswell")


def _windows(oh: int, ow: int, s: int, d: int, ry: int, rx: int) -> tuple[slice, slice, slice, slice]:
    """The padded input's points that tap (ry, rx) reads for every output point."""
    return (slice(None), slice(None), slice(ry * d, ry * d + s * (oh - 1) + 1, s),
            slice(rx * d, rx * d + s * (ow - 1) + 1, s))


def conv_input_grad(h, w, x_shape, s, p, d=1):
    """dX of ``Y = conv2d(X, W, s, p, d)`` for the head ``h``: each tap's windows receive
    ``sum_f H[n, f] W[f, c, ry, rx]``, then the padding is cut off."""
    n, c, hh, ww = x_shape
    oh, ow = h.shape[2:]
    dxp = np.zeros((n, c, hh + 2 * p, ww + 2 * p))
    for ry in range(w.shape[2]):
        for rx in range(w.shape[3]):
            dxp[_windows(oh, ow, s, d, ry, rx)] += np.einsum("nfyx,fc->ncyx", h, w[:, :, ry, rx])
    return dxp[:, :, p:p + hh, p:p + ww]


def conv_weight_grad(h, x, w_shape, s, p, d=1):
    """dW of ``Y = conv2d(X, W, s, p, d)``: ``sum_{n, y, x} H[n, f, y, x] Xp[n, c, window]``."""
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = h.shape[2:]
    dw = np.zeros(w_shape)
    for ry in range(w_shape[2]):
        for rx in range(w_shape[3]):
            dw[:, :, ry, rx] = np.einsum("nfyx,ncyx->fc", h, xp[_windows(oh, ow, s, d, ry, rx)])
    return dw


def _chosen(lowered) -> dict[str, str]:
    """The strategy each op of ``lowered`` took (its top-level choice, not its pieces')."""
    return {point.split("#")[0]: label for point, _, label in lowered.offered if "/" not in point}


@pytest.mark.parametrize("target", TARGETS)
def test_few_channel_strided_input_gradient_is_a_product_per_parity(rng, target):
    # A stem: 7x7 stride 2 pad 3 on 3 channels, odd sizes.  Each residue class of dX is a
    # product [3 x 32*16] @ [32*16 x ~210]; before, the 3 rows were below the micro-kernel's
    # minimum and dX ran as a scalar nest testing `% 2` innermost.
    X = ta.placeholder((2, 3, 29, 27), "float32", "X")
    W = ta.placeholder((32, 3, 7, 7), "float32", "W")
    f = ta.function(ta.topi.nn.conv2d(X, W, 2, 3), [X, W], target=target)
    assert _chosen(f.lower_backward())["X.grad"] == "parity"
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    w = rng.uniform(-1, 1, W.shape).astype(np.float32)
    h = rng.uniform(-1, 1, (2, 32, 15, 14)).astype(np.float32)
    want_x = conv_input_grad(h.astype(np.float64), w.astype(np.float64), X.shape, 2, 3)
    want_w = conv_weight_grad(h.astype(np.float64), x.astype(np.float64), W.shape, 2, 3)
    residuals = f.forward(x, w)[1]
    for threads in (1, 2):
        f.backward_kernel.num_threads = threads
        gx, gw = f.backward(residuals, h)
        np.testing.assert_allclose(gx, want_x, rtol=1e-4, atol=1e-4 * np.abs(want_x).max())
        np.testing.assert_allclose(gw, want_w, rtol=1e-4, atol=1e-4 * np.abs(want_w).max())
