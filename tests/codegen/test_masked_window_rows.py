"""Packing a convolution's windows straight from its unpadded input: lanes in range as masks.

A convolution ``Y[n, f, y, x] = sum if_then_else(in range, X[n, c, y + ry - 1, x + rx - 1], 0) W[f, c,
ry, rx]`` packs its input's windows as panels of output points ``(y, x)``; a panel's vector of
points crosses at most one image row, and its lanes whose window leaves the image (``x + rx - 1``
out of ``[0, width)``) read the neighbouring row's values in memory.  The library's ``COPY`` packer
turns the checks into one lane mask per vector and row of the panel and loads the lanes in range
alone, zeros elsewhere; a neighbouring row's NaN or inf must never leak into a window.

Oracles: NumPy's windows of a zero-padded copy in float64, and ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm.library import piece_ir
from tensorad.codegen.target import parse_target

import tensorad as ta

RNG = np.random.default_rng(54)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_copy_packer_has_one_masked_row_loop_per_count_of_checks(target):
    text = piece_ir("float32", 8, 32, ("B", gd.COPY), parse_target(target))
    assert all(f"mk{n}.body" in text for n in range(1, gd.MAXCHK + 1))
    assert "llvm.masked.load" in text


def _conv(x, w, pad):
    """Y in float64 by explicit windows of a zero-padded copy (stride 1)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    w = w.astype(np.float64)
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            y += np.einsum("ncyx,fc->nfyx", xp[:, :, ry:ry + oh, rx:rx + ow], w[:, :, ry, rx])
    return y


@pytest.mark.parametrize("dtype,shape,target", [
    ("float32", (2, 3, 6, 19), "llvm"),   # rows longer than a vector: whole panels take the lane masks
    ("float64", (1, 2, 5, 23), "llvm"),
    ("float32", (2, 3, 6, 19), "llvm -mcpu=haswell"),  # (AVX2's masked loads)
    ("float32", (2, 2, 4, 7), "llvm"),    # rows shorter than a vector: the run-by-run path
])
def test_unpadded_windows_match_numpy_and_keep_nan_and_inf_of_the_image_alone(dtype, shape, target):
    n, c, h, wd = shape
    X = ta.placeholder(shape, dtype, "X")
    W = ta.placeholder((5, c, 3, 3), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, target=target)
    assert "matrix product" in str(kern.lowered) and ".padded" not in str(kern.lowered)
    assert "packB_copy" in kern.compiled.llvm_ir_unoptimized
    x = RNG.uniform(-1, 1, shape).astype(dtype)
    w = RNG.uniform(-1, 1, (5, c, 3, 3)).astype(dtype)
    # the values a lane just outside a window reads in memory: a row's last and the next row's first
    x[0, 0, 1, wd - 1] = np.inf
    x[0, 0, 2, 0] = np.nan
    x[-1, -1, h - 1, wd - 1] = -np.inf  # (the image's last element: nothing of it read past the end)
    want = _conv(x, w, 1)
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    tol = 1e-5 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kern.num_threads = threads
        got = kern(x, w)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x, W: w}), got, rtol=tol, atol=tol)
