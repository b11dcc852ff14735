"""Random shapes, strides, paddings, dilations and groups for the spatial layers, against NumPy
formulas written here (``ta.evaluate``, and ``ta.build`` with the gradient for a few)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta

nn = ta.topi.nn
SETTINGS = dict(deadline=None, derandomize=True, max_examples=25,
                suppress_health_check=[HealthCheck.too_slow])


def np_conv2d_transpose(x, w, s, p, op, d):
    """Scatter each input element times the (dilated) kernel, then crop the padding."""
    n, c, h, wd = x.shape
    _, f, kh, kw = w.shape
    full = np.zeros((n, f, (h - 1) * s + d * (kh - 1) + 1 + op, (wd - 1) * s + d * (kw - 1) + 1 + op))
    for iy in range(h):
        for ix in range(wd):
            for ry in range(kh):
                for rx in range(kw):
                    full[:, :, iy * s + ry * d, ix * s + rx * d] += x[:, :, iy, ix] @ w[:, :, ry, rx]
    ho, wo = full.shape[2] - 2 * p, full.shape[3] - 2 * p
    return full[:, :, p:p + ho, p:p + wo]


def np_conv2d(x, w, s, p, d, groups):
    x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    ho, wo = (h - d * (kh - 1) - 1) // s + 1, (wd - d * (kw - 1) - 1) // s + 1
    fg = f // groups
    y = np.zeros((n, f, ho, wo))
    for ff in range(f):
        g0 = (ff // fg) * cg
        for ry in range(kh):
            for rx in range(kw):
                oy, ox = ry * d, rx * d
                patch = x[:, g0:g0 + cg, oy:oy + s * (ho - 1) + 1:s, ox:ox + s * (wo - 1) + 1:s]
                y[:, ff] += np.einsum("nchw,c->nhw", patch, w[ff, :, ry, rx])
    return y


@st.composite
def transpose_case(draw):
    s, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    k = draw(st.integers(1, 4))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    full = min(h, w) - 1
    p = draw(st.integers(0, max(0, (full * s + d * (k - 1)) // 2)))
    op = draw(st.integers(0, max(s, d) - 1))
    c, f = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return (1, c, h, w), (c, f, k, k), s, p, op, d


@settings(**SETTINGS)
@given(transpose_case())
def test_conv2d_transpose_random(case):
    xs, ws, s, p, op, d = case
    x, w = ta.placeholder(xs, "float64", "X"), ta.placeholder(ws, "float64", "W")
    rng = np.random.default_rng(0)
    xv, wv = rng.normal(size=xs), rng.normal(size=ws)
    want = np_conv2d_transpose(xv, wv, s, p, op, d)
    y = nn.conv2d_transpose(x, w, s, p, op, d)
    np.testing.assert_allclose(ta.evaluate([y], {x: xv, w: wv})[0], want, rtol=1e-10, atol=1e-12)


@st.composite
def grouped_case(draw):
    groups = draw(st.integers(1, 3))
    cg, fg = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    s, d, k = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    p = draw(st.integers(0, k - 1))
    size = draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 6))
    return (1, groups * cg, size, size), (groups * fg, cg, k, k), s, p, d, groups


@settings(**SETTINGS)
@given(grouped_case())
def test_grouped_conv2d_random(case):
    xs, ws, s, p, d, groups = case
    x, w = ta.placeholder(xs, "float64", "X"), ta.placeholder(ws, "float64", "W")
    rng = np.random.default_rng(1)
    xv, wv = rng.normal(size=xs), rng.normal(size=ws)
    y = nn.conv2d(x, w, s, p, d, groups=groups)
    np.testing.assert_allclose(ta.evaluate([y], {x: xv, w: wv})[0], np_conv2d(xv, wv, s, p, d, groups),
                               rtol=1e-10, atol=1e-12)


def np_interp(x, axis, s, align):
    n = x.shape[axis]
    rows = []
    for o in range(n * s):
        if align:
            src = o * (n - 1) / (n * s - 1) if n * s > 1 else 0.0
        else:
            src = max((o + 0.5) / s - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n - 1)
        lam = src - i0
        rows.append((1 - lam) * np.take(x, i0, axis) + lam * np.take(x, min(i0 + 1, n - 1), axis))
    return np.stack(rows, axis)


@settings(**SETTINGS)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.booleans(),
       st.sampled_from(["nearest", "bilinear"]))
def test_upsampling_random(h, w, sh, sw, align, method):
    x = ta.placeholder((2, h, w), "float64", "X")
    xv = np.random.default_rng(2).normal(size=(2, h, w))
    y = nn.upsampling(x, (sh, sw), method, align)
    want = (xv.repeat(sh, 1).repeat(sw, 2) if method == "nearest"
            else np_interp(np_interp(xv, 1, sh, align), 2, sw, align))
    np.testing.assert_allclose(ta.evaluate([y], {x: xv})[0], want, rtol=1e-10, atol=1e-12)
