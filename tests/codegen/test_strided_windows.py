"""Strided convolution forwards on the packed library: side B reads the input's windows at
stride 2 along the output columns, packed as every other lane of two vector loads (``COPY2``)
-- from the zero-padded copy, or from the unpadded input under range checks of step 2.

Oracles: a float64 NumPy convolution written here and, for the choice of packing, the
library symbol the kernel calls (structure, never time).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta


def _conv(x, w, stride, pad, dil):
    """Y[n, f, y, x] = sum_{c, ry, rx} Xp[n, c, y*s + ry*d, x*s + rx*d] W[f, c, ry, rx]."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - dil * (kh - 1) - 1) // stride + 1
    ow = (xp.shape[3] - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            win = xp[:, :, ry * dil:ry * dil + stride * (oh - 1) + 1:stride,
                     rx * dil:rx * dil + stride * (ow - 1) + 1:stride]
            out += np.einsum("ncyx,fc->nfyx", win, w[:, :, ry, rx])
    return out


def _check(kern, x, w, want, dtype):
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, w), want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("choice", ["padded", "microkernel"])
@pytest.mark.parametrize("dtype,target", [("float32", "llvm -mcpu=haswell"),
                                          ("float64", "llvm -mcpu=haswell"),
                                          ("float32", "llvm -mcpu=x86-64")])
def test_stride_2_forward_packs_windows_by_even_lanes(choice, dtype, target):
    # Y[n, f, y, x] = sum X[n, c, 2y + ry - 1, 2x + rx - 1] W[f, c, ry, rx]: along x the window
    # steps 2 elements; element-by-element packing cost as much as the product itself
    # (8 x 64 x 56 x 56 -> 8 channels: 13.4 ms against 7.4 for strided packing, AMD EPYC)
    rng = np.random.default_rng(3)
    X = ta.placeholder((2, 5, 23, 41), dtype, "X")
    W = ta.placeholder((7, 5, 3, 3), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, 2, 1)
    point = ta.lower([Y], [X, W], target=target).offered[0][0]
    kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, target=target,
                    choices={point: choice})
    assert "matrix product" in str(kern.lowered)
    assert "packB_copy2" in kern.compiled.llvm_ir_unoptimized
    x, w = rng.standard_normal(X.shape).astype(dtype), rng.standard_normal(W.shape).astype(dtype)
    _check(kern, x, w, _conv(x.astype(np.float64), w.astype(np.float64), 2, 1, 1), dtype)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), c=st.integers(1, 6), f=st.integers(1, 9), h=st.integers(5, 19),
       wd=st.integers(5, 40), k=st.sampled_from([1, 2, 3, 5]), stride=st.integers(1, 3),
       pad=st.integers(0, 3), dil=st.integers(1, 2), padded=st.booleans(), seed=st.integers(0, 99))
def test_random_strided_convolutions_match_numpy(n, c, f, h, wd, k, stride, pad, dil, padded, seed):
    if (h + 2 * pad - dil * (k - 1) - 1) < 0 or (wd + 2 * pad - dil * (k - 1) - 1) < 0:
        return
    rng = np.random.default_rng(seed)
    X = ta.placeholder((n, c, h, wd), "float32", "X")
    W = ta.placeholder((f, c, k, k), "float32", "W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, stride, pad, dil))
    offered = ta.lower([Y], [X, W]).offered
    choices = {p: ("padded" if padded and "padded" in labels else "microkernel")
               for p, labels, _ in offered if "microkernel" in labels}
    kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, choices=choices)
    x, w = rng.standard_normal(X.shape).astype(np.float32), rng.standard_normal(W.shape).astype(np.float32)
    want = np.maximum(_conv(x.astype(np.float64), w.astype(np.float64), stride, pad, dil), 0)
    _check(kern, x, w, want, "float32")
