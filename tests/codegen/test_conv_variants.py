"""Convolution variants beyond the ResNet 3x3 (the ``convs`` benchmark suite): the strategy each
gradient takes, and its values.

* the input gradient of a strided convolution on few input channels (a ResNet stem, RGB) is
  one matrix product per residue class (parity), though each has only 3 rows;
* a transposed convolution's forward is one product per residue class of its output (each
  class meets only its own taps), and a sum over one residue class of an axis (its weight
  gradient) runs over that class alone (``codegen.unstride``);

Oracles: float64 NumPy convolutions and their adjoints written here (window by window), at odd
sizes, 1 and 2 threads, on the host and on ``-mcpu=haswell``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from tensorad.codegen.passes.strided_sums import unstride

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import ComputeOp, Tensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

TARGETS = ("llvm", "llvm -mcpu=haswell")
#: the pinned target (typical caches) on which a test of values at one of TARGETS checks the cost model's
#: choice: the host's ISA and caches choose differently on other CPUs
CHOOSES_ON = {"llvm": pinned("llvm -mcpu=skylake-avx512"), "llvm -mcpu=haswell": pinned("llvm -mcpu=haswell")}


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
    Y = ta.topi.nn.conv2d(X, W, 2, 3)
    assert _chosen(ta.function(Y, [X, W], target=CHOOSES_ON[target]).lower_backward())["X.grad"] == "parity"
    f = ta.function(Y, [X, W], target=target)
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


def _canvas(t, p: int, size: tuple[int, int]):
    """``t`` placed at offset ``p`` of a zero canvas of ``size`` (a transposed convolution's
    uncropped output plane)."""
    out = np.zeros(t.shape[:2] + size)
    out[:, :, p:p + t.shape[2], p:p + t.shape[3]] = t
    return out


def conv_transpose_and_grads(x, w, h, s, p, op=0):
    """``Y = conv_transpose2d(X, W [C, F, kh, kw], s, p, output_padding=op)`` and, for the head
    ``h``, dX and dW: input point ``(y, x)`` meets canvas point ``(y s + ry, x s + rx)``, and
    the output is the canvas with ``p`` cut off at the start."""
    n, _, hh, ww = x.shape
    kh, kw = w.shape[2:]
    oh, ow = (hh - 1) * s - 2 * p + kh + op, (ww - 1) * s - 2 * p + kw + op
    size = (oh + 2 * p + s + kh, ow + 2 * p + s + kw)
    canvas = np.zeros((n, w.shape[1]) + size)
    hc = _canvas(h, p, size)
    dx, dw = np.zeros(x.shape), np.zeros(w.shape)
    for ry in range(kh):
        for rx in range(kw):
            at = (slice(None), slice(None), slice(ry, ry + s * (hh - 1) + 1, s),
                  slice(rx, rx + s * (ww - 1) + 1, s))
            canvas[at] += np.einsum("ncyx,cf->nfyx", x, w[:, :, ry, rx])
            dx += np.einsum("nfyx,cf->ncyx", hc[at], w[:, :, ry, rx])
            dw[:, :, ry, rx] = np.einsum("ncyx,nfyx->cf", x, hc[at])
    return canvas[:, :, p:p + oh, p:p + ow], dx, dw


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k,s,p,op", [(2, 2, 0, 0), (3, 2, 1, 1), (3, 3, 0, 0)])
def test_transposed_conv_forward_is_a_product_per_parity(rng, target, k, s, p, op):
    # The forward meets one of the s*s tap classes per output point (a 2x2 stride 2 kernel: 1
    # of 4 taps), so as one product it multiplied zeros for most of its terms; its weight
    # gradient sums over the zero-dilated input's points, of which 1 in s*s holds a value.
    X = ta.placeholder((2, 64, 13, 11), "float32", "X")
    W = ta.placeholder((64, 32, k, k), "float32", "W")
    Y = ta.topi.nn.conv2d_transpose(X, W, s, p, output_padding=op)
    assert _chosen(ta.lower([Y], [X, W], target=CHOOSES_ON[target]))["conv2d_transpose"] == "parity"
    f = ta.function(Y, [X, W], target=target)
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    w = rng.uniform(-1, 1, W.shape).astype(np.float32)
    h = rng.uniform(-1, 1, Y.shape).astype(np.float32)
    wants = conv_transpose_and_grads(*(a.astype(np.float64) for a in (x, w, h)), s, p, op)
    for threads in (1, 2):
        f.forward_kernel.num_threads = f.backward_kernel.num_threads = threads
        y, residuals = f.forward(x, w)
        for got, want in zip((y, *f.backward(residuals, h)), wants):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("s,k", [(2, 2), (3, 3), (2, 3)])
def test_a_sum_over_one_residue_class_runs_over_that_class_alone(rng, s, k):
    # dW of a transposed convolution: sum over y, x with y % s == 0 && x % s == 0 (the points
    # of the zero-dilated input).  unstride re-indexes y = s y' (x alike): no modulo is left,
    # the axes are s times shorter, and the values are those of the original sum.
    X = ta.placeholder((2, 3, 5, 4), "float64", "X")
    W = ta.placeholder((3, 2, k, k), "float64", "W")
    Y = ta.topi.nn.conv2d_transpose(X, W, s)
    H = ta.placeholder(Y.shape, "float64", "H")
    dW = ta.gradient(Y, [W], H)[0]
    op = dW.op
    red = unstride(op.body[0])
    assert not [n for n in walk(red) if n.op is Op.MOD]
    before = sorted(a.extent for a in op.body[0].arg.axes)
    after = sorted(a.extent for a in red.arg.axes)
    assert sum(after) < sum(before)
    new = Tensor(ComputeOp(op.name, op.tag, op.axes, (red,)), 0)
    feed = {X: rng.normal(size=X.shape), W: rng.normal(size=W.shape), H: rng.normal(size=Y.shape)}
    np.testing.assert_allclose(ta.evaluate(new, feed), ta.evaluate(dW, feed), rtol=1e-12)
