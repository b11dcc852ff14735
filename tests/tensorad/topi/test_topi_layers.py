"""The layers of today's models (mean, var, the normalizations, GELU, erf, grouped and
transposed convolution, upsampling, attention) against oracles tensorad did not compute.

For every case:

* **forward**: ``ta.evaluate`` (float64) and ``ta.build`` (float32) against a NumPy formula
  written here;
* **gradient**: ``ta.gradcheck`` (reverse and forward mode against float64 finite differences),
  and the built gradient with a random head against central differences of the NumPy formula;
* **work**: ``ta.lower(gradients, inputs + [H]).work`` against the work of the hand-written
  gradient, counted in this file loop nest by loop nest (one count per tensor a person would
  write).  ``RATIO`` records the measured ratio; where it is above 1.1 the comment says why.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn
EPS = 1e-5
_erf = np.vectorize(math.erf, otypes=[np.float64])


# ---- NumPy oracles --------------------------------------------------------------------------

def np_norm(x, axes, g=None, b=None, shape=None):
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(v + EPS)
    if g is not None:
        y = y * g.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


def np_group_norm(x, groups, g, b):
    n, c = x.shape[:2]
    y = np_norm(x.reshape(n, groups, -1), 2).reshape(x.shape)
    return y * g.reshape(1, c, 1, 1) + b.reshape(1, c, 1, 1)


def np_conv2d(x, w, stride, pad, groups):
    """Sum over the kernel taps of strided input slices times the tap's weights, per group."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    xg = x.reshape(n, groups, cg, h, wd)
    wg = w.reshape(groups, f // groups, cg, kh, kw)
    y = np.zeros((n, groups, f // groups, ho, wo))
    for ky in range(kh):
        for kx in range(kw):
            patch = xg[..., ky:ky + stride * (ho - 1) + 1:stride, kx:kx + stride * (wo - 1) + 1:stride]
            y += np.einsum("ngchw,gfc->ngfhw", patch, wg[..., ky, kx])
    return y.reshape(n, f, ho, wo)


def np_conv2d_transpose(x, w, stride, pad, out_pad):
    """Scatter every input element's product with the kernel, then crop the padding."""
    n, c, h, wd = x.shape
    _, f, kh, kw = w.shape
    full = np.zeros((n, f, (h - 1) * stride + kh + out_pad, (wd - 1) * stride + kw + out_pad))
    for iy in range(h):
        for ix in range(wd):
            full[:, :, iy * stride:iy * stride + kh, ix * stride:ix * stride + kw] += \
                np.einsum("nc,cfhw->nfhw", x[:, :, iy, ix], w)
    ho = (h - 1) * stride - 2 * pad + kh + out_pad
    wo = (wd - 1) * stride - 2 * pad + kw + out_pad
    return full[:, :, pad:pad + ho, pad:pad + wo]


def np_interp_axis(x, axis, s, align_corners):
    """torch's linear interpolation along one axis, coordinate by coordinate."""
    n = x.shape[axis]
    out = []
    for o in range(n * s):
        src = o * (n - 1) / (n * s - 1) if align_corners else max((o + 0.5) / s - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n - 1)
        i1 = min(i0 + 1, n - 1)
        lam = src - i0
        out.append((1 - lam) * np.take(x, i0, axis) + lam * np.take(x, i1, axis))
    return np.stack(out, axis)


def np_bilinear(x, sh, sw, align_corners=False):
    return np_interp_axis(np_interp_axis(x, x.ndim - 2, sh, align_corners), x.ndim - 1, sw, align_corners)


def np_attention(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# ---- hand-written gradient work ---------------------------------------------------------------

def norm_hand(n, r):
    """Normalization over groups, ``n`` elements, ``r`` statistics groups: forward statistics
    mean and var (n each), rstd (r); backward dgamma, dbeta, the two per-group sums
    ``sum H*gamma`` and ``sum H*gamma*(X - mean)``, and dX (n each)."""
    return 7 * n + r


def valid_pairs(out, k, stride, pad, size, dil=1):
    """Number of (output, tap) pairs of one axis that read inside the unpadded input."""
    return sum(1 for o in range(out) for t in range(k) if 0 <= o * stride + t * dil - pad < size)


def conv_hand(n, f, cg, py, px):
    """dW and dX each do the valid multiply-adds of the forward: ``n f cg`` times the valid
    (output, tap) pairs of each axis."""
    return 2 * n * f * cg * py * px


def attention_hand(b, pairs, d, dv):
    """Per (query, key) pair: scores (d), max, exp, sum (1 each), weights (1), dV (dv),
    dWeights (dv), the row sum of dWeights*weights (1), dScores (1), dQ (d), dK (d)."""
    return b * pairs * (3 * d + 2 * dv + 5)


def _causal_pairs(length, keys):
    return sum(min(i + 1, keys) for i in range(length))


# name: (input shapes, builder, numpy oracle, hand-written gradient work, measured ratio)
CASES = {
    "mean": ([(3, 4, 5)], lambda X: topi.mean(X, axis=1), lambda x: x.mean(1),
             60, 1.0),  # dX = H / 4 broadcast: 60
    "mean_all_keepdims": ([(3, 4)], lambda X: topi.mean(X, keepdims=True),
                          lambda x: x.mean(keepdims=True), 12, 1.0),
    # mean (60) and dX = 2 (X - mean) H / (n - 1) (60), as torch's var_backward.  The path
    # through the mean, sum_k 2 (X - mean) H, is zero in exact arithmetic: the optimizer factors
    # H out of it and it costs nothing more.
    "var": ([(3, 4, 5)], lambda X: topi.var(X, axis=(0, 2), ddof=1),
            lambda x: x.var(axis=(0, 2), ddof=1), 120, 1.0),
    "layer_norm": ([(4, 6), (6,), (6,)], lambda X, g, b: nn.layer_norm(X, g, b),
                   lambda x, g, b: np_norm(x, -1, g, b, (1, 6)), norm_hand(24, 4), 1.0),
    "layer_norm_2d_no_affine": ([(2, 3, 4)], lambda X: nn.layer_norm(X, ndim=2),
                                lambda x: np_norm(x, (1, 2)), None, None),
    "batch_norm": ([(2, 3, 4, 4), (3,), (3,)], lambda X, g, b: nn.batch_norm(X, g, b),
                   lambda x, g, b: np_norm(x, (0, 2, 3), g, b, (1, 3, 1, 1)), norm_hand(96, 3), 1.0),
    # inference: Y = (X - rm) rstd g + b; dX, dg, db, d(rm), d(rv) one pass each (5n), rstd (c)
    "batch_norm_inference": ([(2, 3, 2, 2), (3,), (3,), (3,), (3,)],
                             lambda X, g, b, m, v: nn.batch_norm(X, g, b, m, v + 1.0, training=False),
                             lambda x, g, b, m, v: (x - m.reshape(1, 3, 1, 1)) / np.sqrt(
                                 v.reshape(1, 3, 1, 1) + 1.0 + EPS) * g.reshape(1, 3, 1, 1)
                             + b.reshape(1, 3, 1, 1), 5 * 24 + 3, 1.0),
    "group_norm": ([(2, 4, 3, 3), (4,), (4,)], lambda X, g, b: nn.group_norm(X, 2, g, b),
                   lambda x, g, b: np_group_norm(x, 2, g, b), norm_hand(72, 4), 1.0),
    "gelu": ([(3, 4)], lambda X: nn.gelu(X), lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), 12, 1.0),
    "gelu_tanh": ([(3, 4)], lambda X: nn.gelu(X, "tanh"), np_gelu_tanh, 12, 1.0),
    "erf": ([(3, 4)], lambda X: topi.erf(X), _erf, 12, 1.0),
    "depthwise_conv2d": ([(2, 4, 5, 5), (4, 1, 3, 3)], lambda X, W: nn.conv2d(X, W, 1, 1, groups=4),
                         lambda x, w: np_conv2d(x, w, 1, 1, 4),
                         conv_hand(2, 4, 1, valid_pairs(5, 3, 1, 1, 5), valid_pairs(5, 3, 1, 1, 5)), 1.0),
    "group_conv2d": ([(1, 4, 6, 6), (6, 2, 3, 3)], lambda X, W: nn.conv2d(X, W, 2, 1, groups=2),
                     lambda x, w: np_conv2d(x, w, 2, 1, 2),
                     conv_hand(1, 6, 2, valid_pairs(3, 3, 2, 1, 6), valid_pairs(3, 3, 2, 1, 6)), 1.0),
    "conv2d_transpose": ([(1, 2, 4, 4), (2, 3, 3, 3)],
                         lambda X, W: nn.conv2d_transpose(X, W, 2, 1, 1),
                         lambda x, w: np_conv2d_transpose(x, w, 2, 1, 1),
                         # the forward's products: (input, tap) pairs landing inside the output
                         conv_hand(1, 3, 2, valid_pairs(4, 3, 2, 1, 8), valid_pairs(4, 3, 2, 1, 8)), 1.0),
    "upsampling_nearest": ([(1, 2, 3, 4)], lambda X: nn.upsampling(X, 2),
                           lambda x: x.repeat(2, 2).repeat(2, 3), 96, 1.0),  # dX sums 4 heads: 96
    # separable: dT from dY (2 taps per output of 144) and dX from dT (2 taps per 48): 384;
    # the clamped edges are separate loop nests in ours
    "upsampling_bilinear": ([(1, 2, 3, 4)], lambda X: nn.upsampling(X, (2, 3), "bilinear"),
                            lambda x: np_bilinear(x, 2, 3), 2 * 144 + 2 * 48, 1.03),
    "upsampling_bilinear_align_corners": ([(1, 2, 3, 4)],
                                          lambda X: nn.upsampling(X, 2, "bilinear", True),
                                          lambda x: np_bilinear(x, 2, 2, True), 2 * 96 + 2 * 48, 1.02),
    "attention": ([(2, 5, 4), (2, 6, 4), (2, 6, 3)],
                  lambda Q, K, V: nn.scaled_dot_product_attention(Q, K, V),
                  lambda q, k, v: np_attention(q, k, v, False), attention_hand(2, 30, 4, 3), 1.0),
    "attention_causal": ([(2, 5, 4), (2, 6, 4), (2, 6, 3)],
                         lambda Q, K, V: nn.scaled_dot_product_attention(Q, K, V, causal=True),
                         lambda q, k, v: np_attention(q, k, v, True),
                         attention_hand(2, _causal_pairs(5, 6), 4, 3), 1.0),
}


def _program(name, dtype="float64"):
    shapes, build, _, _, _ = CASES[name]
    inputs = [ta.placeholder(s, dtype, f"in{i}") for i, s in enumerate(shapes)]
    return inputs, build(*inputs)


def _data(name, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5, 1.5, s) for s in CASES[name][0]]


@pytest.mark.parametrize("name", CASES)
def test_forward_matches_numpy(name):
    data = _data(name)
    want = CASES[name][2](*data)
    inputs, y = _program(name)
    got = ta.evaluate([y], dict(zip(inputs, data)))[0]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    inputs32, y32 = _program(name, "float32")
    got32 = ta.build([y32], inputs32)(*[d.astype(np.float32) for d in data])
    np.testing.assert_allclose(got32, want, rtol=2e-4, atol=2e-5)


def _numeric_gradient(fn, data, head, i, step=1e-6):
    grad = np.zeros_like(data[i])
    for j in np.ndindex(data[i].shape):
        plus = [d.copy() for d in data]
        minus = [d.copy() for d in data]
        plus[i][j] += step
        minus[i][j] -= step
        grad[j] = (np.sum(head * fn(*plus)) - np.sum(head * fn(*minus))) / (2 * step)
    return grad


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences_and_its_work_the_hand_written(name):
    """The built gradient against central differences, and its work (the kernel's, as ``ta.lower``
    counts it) against the hand-written gradient's where the case gives one."""
    inputs, y = _program(name)
    assert ta.gradcheck(y, inputs)
    data = _data(name, seed=1)
    head = np.random.default_rng(2).uniform(-1, 1, y.shape)
    h = ta.placeholder(y.shape, "float64", "H")
    grads = ta.JacobianRecursive(y, inputs, head=h)
    kernel = ta.build(grads, inputs + [h])
    got = kernel(*data, head)
    got = got if isinstance(got, tuple) else (got,)
    for i, g in enumerate(got):
        want = _numeric_gradient(CASES[name][2], data, head, i)
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7, err_msg=f"{name}: input {i}")
    hand, ratio = CASES[name][3], CASES[name][4]
    if hand is not None:
        assert kernel.work <= ratio * hand, f"{name}: gradient work {kernel.work}, hand-written {hand}"
