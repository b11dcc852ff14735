"""Packing a range-checked side whose checks read only ``k``: one test per row of a panel.

A channels-last (NHWC) convolution reads its input windows ``X[n, y + ry - 1, x + rx - 1, c]``
under range checks on ``y + ry - 1`` and ``x + rx - 1``; as a matrix product over panels of
``c`` (its weight gradient: rows ``c``, reduction ``(n, y, x)``) those checks have one value
across a panel.  The library's ``COPY`` packer used to take its general path for every panel
row of a checked side -- a loop over the checks, then three run copies of 4 elements -- which
made the weight gradient of an NHWC 3x3 convolution 4.5x slower than its NCHW twin.  It now
tests the checks once per row of such a panel and copies the row or stores zeros.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm.library import piece_ir
from tensorad.codegen.target import parse_target

import tensorad as ta

RNG = np.random.default_rng(5)


def test_copy_packer_has_a_per_row_path_for_checks_uniform_over_a_panel():
    text = piece_ir("float32", 4, 24, ("A", gd.COPY), parse_target())
    assert "uk.body" in text and "uw.body" in text  # per-row test; the panel's uniformity scan


def _conv_nhwc(X, W, pad):
    n, h, w, c = X.shape
    kh, kw, _, o = W.shape
    oh, ow = h + 2 * pad - kh + 1, w + 2 * pad - kw + 1
    rc, ry, rx = ta.reduce_axis((0, c), "c"), ta.reduce_axis((0, kh), "ry"), ta.reduce_axis((0, kw), "rx")
    return ta.compute((n, oh, ow, o), lambda b, y, x, oc: ta.sum(
        ta.if_then_else((y + ry >= pad) & (y + ry < h + pad) & (x + rx >= pad) & (x + rx < w + pad),
                        X[b, y + ry - pad, x + rx - pad, rc], 0.0) * W[ry, rx, rc, oc],
        axis=[ry, rx, rc]), name="conv_nhwc")


def _reference(x, w, h, pad):
    """Forward and both gradients in float64, by explicit windows."""
    n, hh, ww, c = x.shape
    kh, kw, _, o = w.shape
    xp = np.zeros((n, hh + 2 * pad, ww + 2 * pad, c))
    xp[:, pad:pad + hh, pad:pad + ww] = x
    oh, ow = hh + 2 * pad - kh + 1, ww + 2 * pad - kw + 1
    y = np.zeros((n, oh, ow, o))
    dw = np.zeros(w.shape)
    dxp = np.zeros(xp.shape)
    for ry in range(kh):
        for rx in range(kw):
            win = xp[:, ry:ry + oh, rx:rx + ow]
            y += win @ w[ry, rx]
            dw[ry, rx] = np.einsum("nyxc,nyxo->co", win, h)
            dxp[:, ry:ry + oh, rx:rx + ow] += h @ w[ry, rx].T
    return y, dxp[:, pad:pad + hh, pad:pad + ww], dw


@pytest.mark.parametrize("shape", [(2, 9, 11, 13, 10), (3, 6, 5, 40, 27)])
def test_nhwc_convolution_and_gradients_match_numpy(shape):
    # odd channel counts: whole panels take the new path, the last (partial) one the general
    n, hh, ww, c, o = shape
    X = ta.placeholder((n, hh, ww, c), "float32", "X")
    W = ta.placeholder((3, 3, c, o), "float32", "W")
    Y = _conv_nhwc(X, W, 1)
    H = ta.placeholder(Y.shape, "float32", "H")
    dX, dW = ta.gradient(Y, [X, W], H)
    lowered = ta.lower([Y, dX, dW], [X, W, H], microkernel=True)
    notes = [line for line in str(lowered).splitlines() if "# nest" in line]
    assert any(note.lstrip().startswith("# nest W.grad") and "micro-kernel" in note for note in notes), notes
    x, w, h = (RNG.uniform(-1, 1, s).astype(np.float32) for s in ((n, hh, ww, c), (3, 3, c, o), Y.shape))
    got = ta.build([Y, dX, dW], [X, W, H], microkernel=True)(x, w, h)
    for a, want in zip(got, _reference(*(v.astype(np.float64) for v in (x, w, h)), 1)):
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)


def test_copy_packer_tests_checks_shared_by_every_panel_once_per_row():
    # checks with one value over all of a call's outer positions (every panel of ``c``) are
    # tested once per ``k`` for all the panels (loop ``ak``), not once per panel and ``k``; then
    # blocks of rows (``kb``) panel by panel (``sp``)
    text = piece_ir("float32", 4, 24, ("A", gd.COPY), parse_target())
    assert "ak.body" in text and "kb.body" in text and "sp.body" in text


def test_nhwc_input_gradient_sums_its_taps_channels_last_so_both_sides_are_transposed():
    # dX[n, y, x, c] = sum_{o, ry, rx} H[n, y - ry + 1, x - rx + 1, o] W[ry, rx, c, o]: the
    # optimizer leaves the sum over (o, ry, rx), where neither side has a unit-stride run along
    # k and both were packed element by element (GATHER); over (ry, rx, o) both read runs of o
    n, hh, ww, c, o = 2, 10, 10, 32, 48
    X = ta.placeholder((n, hh, ww, c), "float32", "X")
    W = ta.placeholder((3, 3, c, o), "float32", "W")
    Y = _conv_nhwc(X, W, 1)
    H = ta.placeholder(Y.shape, "float32", "H")
    (dX,) = ta.gradient(Y, [X], H)
    kern = ta.build([dX], [W, H], microkernel=True)
    pieces = set(kern.compiled.library)
    assert any(p.endswith("packA_transpose") for p in pieces), pieces
    assert not any(p.endswith("_gather") for p in pieces), pieces
    w, h = RNG.uniform(-1, 1, (3, 3, c, o)), RNG.uniform(-1, 1, Y.shape)
    want = _reference(np.zeros((n, hh, ww, c)), w, h, 1)[1]
    np.testing.assert_allclose(kern(w.astype(np.float32), h.astype(np.float32)), want, rtol=1e-4, atol=1e-4)
    # the order itself: the unit-stride axis last; a side contiguous along its outer axes
    # (copied whatever the order) does not vote, and ties keep the given order
    from tensorad.codegen.gemm.contraction import k_order

    i, j, a, b = (ta.reduce_axis((0, e), nm) for e, nm in ((8, "i"), (4, "j"), (3, "a"), (5, "b")))
    m = ta.reduce_axis((0, 8), "m")
    assert k_order(((ta.placeholder((6, 10), "float32", "Q")[2 * a, 2 * b], (m,)),), (b, a)) == (b, a)
    side = ta.placeholder((3, 5, 8), "float32", "S")[a, b, i]
    assert k_order(((side, (j,)),), (b, i, a)) == (a, b, i)
    assert k_order(((side, (i,)),), (b, a)) == (b, a)  # contiguous along its outer axis i
