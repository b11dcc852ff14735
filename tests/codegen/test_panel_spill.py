"""The library's run-wise packers end each run with a whole vector store, not a masked one.

A convolution's windows reach the packers as runs of one output row (13 or 28 elements) in
NR-wide panels (24 on AVX2): every run ended in a masked store, microcoded on AMD CPUs (the
7x13 convolution's forward 20% slower).  The run's last vector now spills up to ``vw - 1``
elements past it, which the panel's later stores overwrite (runs, rows and panels are filled in
ascending order; buffers have ``SLACK`` elements past their end).

Oracles: the convolution written here in NumPy (float64), at odd sizes whose rows are shorter
than, longer than and not a multiple of the panel width, with padding, stride 1 and 2 (the
``COPY`` and ``COPY2`` packers) and dilation, on the host and AVX2/SSE targets.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.gemm.contraction import register_tile
from tensorad.codegen.target import parse_target

import tensorad as ta

TARGETS = ("llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64")


@pytest.mark.parametrize("spec", TARGETS)
@pytest.mark.parametrize("mode", [gd.COPY, gd.COPY2])
def test_run_wise_packers_store_whole_vectors(spec, mode):
    target = parse_target(spec)
    for dtype in ("float32", "float64"):
        mr, nr = register_tile(target, dtype)
        for side in ("A", "B"):
            text = gemmlib.piece_ir(dtype, mr, nr, (side, mode), target)
            assert "llvm.masked.store" not in text, (spec, dtype, side, mode)
            if mode == gd.COPY:
                assert "llvm.masked.load" in text  # nothing past a run is read


def _conv(x, w, stride, pad, dil):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, hp, wp = xp.shape
    f, _, kh, kw = w.shape
    oh, ow = (hp - dil * (kh - 1) - 1) // stride + 1, (wp - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, f, oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            win = xp[:, :, ry * dil:ry * dil + stride * (oh - 1) + 1:stride,
                     rx * dil:rx * dil + stride * (ow - 1) + 1:stride]
            y += np.einsum("ncyx,fc->nfyx", win, w[:, :, ry, rx])
    return y


@settings(max_examples=10, deadline=None)
@given(h=st.integers(3, 9), wd=st.integers(3, 31), k=st.sampled_from([1, 3, 5]),
       stride=st.sampled_from([1, 2]),
       pad=st.integers(0, 2), dil=st.sampled_from([1, 2]), dtype=st.sampled_from(["float32", "float64"]),
       spec=st.sampled_from(TARGETS), padded=st.booleans())
def test_convolution_forward_with_short_window_runs(h, wd, k, stride, pad, dil, dtype, spec, padded):
    if (h + 2 * pad - dil * (k - 1) - 1) < 0 or (wd + 2 * pad - dil * (k - 1) - 1) < 0:
        return
    rng = np.random.default_rng(h * 1000 + wd)
    X = ta.placeholder((2, 3, h, wd), dtype, "X")
    W = ta.placeholder((5, 3, k, k), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, stride, pad, dil)
    kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, target=spec,
                    choices={"conv2d#0": "padded" if padded else "microkernel"})
    x = rng.standard_normal(X.shape).astype(dtype)
    w = rng.standard_normal(W.shape).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-11
    want = _conv(x.astype(np.float64), w.astype(np.float64), stride, pad, dil)
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, w), want, rtol=tol, atol=tol)


@settings(max_examples=8, deadline=None)
@given(h=st.integers(3, 7), wd=st.integers(7, 30), stride=st.sampled_from([1, 2]), pad=st.integers(0, 1),
       dtype=st.sampled_from(["float32", "float64"]), spec=st.sampled_from(TARGETS))
def test_weight_gradient_with_runs_not_a_multiple_of_the_block(h, wd, stride, pad, dtype, spec):
    # dW reads X along the sum's last axis in runs of one output row: a run longer than the
    # transposer's block and not a multiple of it ends in its last block transposed again
    X = ta.placeholder((2, 3, h, wd), dtype, "X")
    W = ta.placeholder((5, 3, 3, 3), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, stride, pad)
    H = ta.placeholder(Y.shape, dtype, "H")
    (gw,) = ta.JacobianRecursive(Y, [W], H)
    kern = ta.build([gw], [X, H], microkernel=True, parallel_min_work=0, target=spec)
    rng = np.random.default_rng(h * 100 + wd)
    x = rng.standard_normal(X.shape).astype(dtype)
    hh = rng.standard_normal(H.shape).astype(dtype)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = H.shape[2:]
    want = np.zeros(W.shape)
    for ry in range(3):
        for rx in range(3):
            win = xp[:, :, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride]
            want[:, :, ry, rx] = np.einsum("nfyx,ncyx->fc", hh.astype(np.float64), win)
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, hh), want, rtol=tol, atol=tol)
