"""A strided depthwise or grouped convolution's input gradient, which is no matrix product,
runs as one reduction per residue class of its output (the ``parity-loops`` strategy): each
class reads at affine indices and sums only its taps, instead of a ``% s`` test and divided
indices in the innermost loop (MobileNet's depthwise 3x3 stride 2 backward 30% faster).

Oracles: NumPy formulas of the gradient written here (float64), at odd sizes with random
strides, padding, dilation and groups, on the host and AVX2 targets, and ``ta.evaluate``.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorad as ta


def _input_grad(h, w, x_shape, stride, pad, dil, groups):
    """dX of Y[n, f, y, x] = sum_{c in f's group, ry, rx} Xp[n, c, y s + ry d, x s + rx d] *
    W[f, c', ry, rx]."""
    n, c, hh, ww = x_shape
    gxp = np.zeros((n, c, hh + 2 * pad, ww + 2 * pad))
    f, cg, kh, kw = w.shape
    fg = f // groups
    oh, ow = h.shape[2:]
    for g in range(groups):
        hs, ws = h[:, g * fg:(g + 1) * fg], w[g * fg:(g + 1) * fg]
        for ry in range(kh):
            for rx in range(kw):
                ys = slice(ry * dil, ry * dil + stride * (oh - 1) + 1, stride)
                xs = slice(rx * dil, rx * dil + stride * (ow - 1) + 1, stride)
                gxp[:, g * cg:(g + 1) * cg, ys, xs] += np.einsum("nfyx,fc->ncyx", hs, ws[:, :, ry, rx])
    return gxp[:, :, pad:pad + hh, pad:pad + ww]


def _grad_kernel(x_shape, w_shape, stride, pad, dil, groups, target):
    X = ta.placeholder(x_shape, "float64", "X")
    W = ta.placeholder(w_shape, "float64", "W")
    Y = ta.topi.nn.conv2d(X, W, stride, pad, dil, groups=groups)
    H = ta.placeholder(Y.shape, "float64", "H")
    (gx,) = ta.JacobianRecursive(Y, [X], H)
    return ta.build([gx], [W, H], parallel_min_work=0, target=target), (X, W, H, gx)


def test_strided_depthwise_input_gradient_runs_per_residue_class():
    kern, _ = _grad_kernel((2, 8, 20, 20), (8, 1, 3, 3), 2, 1, 1, 8, "llvm")
    chosen = {point: label for point, _, label in kern.lowered.offered}
    assert chosen["X.grad#0"] == "parity-loops", kern.lowered.offered
    assert "% 2" not in str(kern.lowered)


@settings(max_examples=8, deadline=None)
@given(size=st.integers(5, 13), stride=st.sampled_from([2, 3]), pad=st.integers(0, 2),
       dil=st.sampled_from([1, 2]), k=st.sampled_from([2, 3]), depthwise=st.booleans(),
       spec=st.sampled_from(["llvm", "llvm -mcpu=haswell"]))
def test_strided_grouped_input_gradients_match_numpy(size, stride, pad, dil, k, depthwise, spec):
    if size + 2 * pad < dil * (k - 1) + 1:
        return
    c, groups = (6, 6) if depthwise else (6, 3)
    x_shape, w_shape = (2, c, size, size + 1), (c, c // groups, k, k)
    kern, (X, W, H, gx) = _grad_kernel(x_shape, w_shape, stride, pad, dil, groups, spec)
    rng = np.random.default_rng(size * 100 + stride)
    w = rng.standard_normal(w_shape)
    h = rng.standard_normal(H.shape)
    want = _input_grad(h, w, x_shape, stride, pad, dil, groups)
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(w, h), want, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(ta.evaluate([gx], {W: w, H: h})[0], want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("stride", [2, 3])
def test_strided_average_pool_gradient(stride):
    X = ta.placeholder((2, 3, 11, 9), "float64", "X")
    Y = ta.topi.nn.pool(X, [3, 3], [stride, stride], [1, 1, 1, 1], "avg")
    H = ta.placeholder(Y.shape, "float64", "H")
    (gx,) = ta.JacobianRecursive(Y, [X], H)
    kern = ta.build([gx], [H], parallel_min_work=0)
    h = np.random.default_rng(stride).standard_normal(H.shape)
    np.testing.assert_allclose(kern(h), ta.evaluate([gx], {H: h})[0], rtol=1e-12, atol=1e-12)
