"""Grouped convolutions as one matrix product per group (codegen/gemm/contraction.py's
``digit_splits``), edge panels packed by transposes (codegen/gemm/pack_routines.py), and sums over a thin
slab of their box left to loops (codegen/strategies/products.py's ``_sparse``).  Oracles: PyTorch
float64 autograd, NumPy sums written here; choices read from the lowering's notes and offers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.loops.domain import where_density

import tensorad as ta
from tensorad import topi

F = torch.nn.functional
RNG = np.random.default_rng(28)
TARGETS = ["llvm", "llvm -mcpu=haswell"]


def _grouped(n, c_in, c_out, groups, size, stride=1, pad=1, k=3):
    X = ta.placeholder((n, c_in, size, size), "float64", name="X")
    W = ta.placeholder((c_out, c_in // groups, k, k), "float64", name="W")
    return X, W, topi.nn.conv2d(X, W, stride, pad, groups=groups)


def _torch(x, w, h, groups, stride, pad):
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = F.conv2d(tx, tw, stride=stride, padding=pad, groups=groups)
    gx, gw = torch.autograd.grad(y, [tx, tw], torch.tensor(h))
    return y.detach().numpy(), gx.numpy(), gw.numpy()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n, c_in, c_out, groups, size, stride, pad, k", [
    (2, 32, 32, 4, 10, 1, 1, 3),   # 8 channels a group, in and out
    (3, 24, 36, 3, 9, 1, 0, 3),    # 8 in, 12 out a group, no padding (no range checks)
    (2, 32, 16, 2, 11, 2, 1, 3),   # strided: the input gradient per residue class
    (1, 20, 40, 5, 7, 1, 2, 5),    # odd sizes, a 5x5 window
])
def test_grouped_convolution_is_a_product_per_group(target, n, c_in, c_out, groups, size, stride, pad, k):
    X, W, Y = _grouped(n, c_in, c_out, groups, size, stride, pad, k)
    H = ta.placeholder(Y.shape, "float64", name="H")
    gX, gW = ta.JacobianRecursive(Y, [X, W], H)
    opts = dict(microkernel=True, target=target, num_threads=2)
    lowered = {name: str(ta.lower([t], [X, W, H], **opts))
               for name, t in (("Y", Y), ("X.grad", gX), ("W.grad", gW))}
    # the group is a batch axis (beside the images, or chunks of them), its channels the rows
    assert f"x{groups} of [{c_out // groups} x" in lowered["Y"], lowered["Y"]
    assert "matrix product batch" in lowered["W.grad"], lowered["W.grad"]
    if stride == 1:
        assert f"x{groups} of [{c_in // groups} x" in lowered["X.grad"], lowered["X.grad"]
    x, w = RNG.uniform(-1, 1, X.shape), RNG.uniform(-1, 1, W.shape)
    h = RNG.uniform(-1, 1, Y.shape)
    want = _torch(x, w, h, groups, stride, pad)
    got = (ta.build([Y], [X, W], **opts)(x, w),) + tuple(ta.build([gX, gW], [X, W, H], **opts)(x, w, h))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_grouped_convolution_defaults_match_torch():
    """With the cost model choosing (products, taps or loops per gradient) and float32."""
    X = ta.placeholder((4, 64, 14, 14), "float32", name="X")
    W = ta.placeholder((64, 8, 3, 3), "float32", name="W")
    Y = topi.nn.conv2d(X, W, 1, 1, groups=8)
    fn = ta.function(Y, [X, W], wrt=[X, W])
    x, w = RNG.uniform(-1, 1, X.shape).astype(np.float32), RNG.uniform(-1, 1, W.shape).astype(np.float32)
    h = RNG.uniform(-1, 1, Y.shape).astype(np.float32)
    y, res = fn.forward(x, w)
    gx, gw = fn.backward(res, h)
    want = _torch(x.astype(np.float64), w.astype(np.float64), h.astype(np.float64), 8, 1, 1)
    for a, b in zip((y, gx, gw), want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * np.abs(b).max())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("columns, pad", [(5, 1), (7, 0), (1, 1)])
def test_an_edge_panel_is_packed_whole(target, columns, pad):
    """A weight gradient of ``columns`` input channels x 9 taps (45, 63 or 9 columns: under one
    register tile's width, or one and a bit) reads its input contiguously along the sum: the
    edge panel goes through the masked transposes, its rows past the last column zeros."""
    X = ta.placeholder((3, columns, 12, 12), "float64", name="X")
    W = ta.placeholder((16, columns, 3, 3), "float64", name="W")
    Y = topi.nn.conv2d(X, W, 1, pad)
    H = ta.placeholder(Y.shape, "float64", name="H")
    (gW,) = ta.JacobianRecursive(Y, [W], H)
    opts = dict(microkernel=True, target=target)
    assert "matrix product" in str(ta.lower([gW], [X, H], **opts))
    x, h = RNG.uniform(-1, 1, X.shape), RNG.uniform(-1, 1, Y.shape)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = Y.shape[2]
    want = np.zeros(W.shape)
    for ry in range(3):
        for rx in range(3):
            want[:, :, ry, rx] = np.einsum("nfyx,ncyx->fc", h, xp[:, :, ry:ry + out, rx:rx + out])
    np.testing.assert_allclose(ta.build([gW], [X, H], **opts)(x, h), want, rtol=1e-11, atol=1e-11)


def test_where_density_counts_the_condition():
    X = ta.placeholder((40, 50), "float32", name="X")
    k = ta.reduce_axis((0, 50), "k")
    S = ta.compute((40,), lambda i: ta.sum(X[i, k], axis=k, where=(k < 5) | (k >= 45)), name="S")
    assert where_density(S.op, S.op.body) == pytest.approx(10 / 50)
    j = ta.reduce_axis((0, 40), "j")
    T = ta.compute((40,), lambda i: ta.sum(X[j, i], axis=j, where=j <= i), name="T")
    assert where_density(T.op, T.op.body) == pytest.approx(40 * 41 / 2 / 1600)
    R = ta.compute((40,), lambda i: ta.sum(X[i, k], axis=k, where=k % 2 == 0), name="R")
    assert where_density(R.op, R.op.body) == 1.0  # (loops over a residue class test each point)


def test_a_thin_slab_of_a_product_is_left_to_loops():
    """4 channels a group: the weight gradient's interior is the tap stream, its border -- a
    sum over the window's edge rows and columns -- was a product over the whole box after the
    group split (2.4 ms of packed zeros); it is loops over its few points."""
    X, W, Y = _grouped(8, 128, 128, 32, 28)
    H = ta.placeholder(Y.shape, "float64", name="H")
    (gW,) = ta.JacobianRecursive(Y, [W], H)
    for target in ("llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"):
        lowered = ta.lower([gW], [X, H], target=target)
        offered = {point: labels for point, labels, _ in lowered.offered}
        assert all("microkernel" not in labels for point, labels in offered.items() if "/" in point), offered
        if target.endswith("avx512"):  # (AVX2's 16 registers hold too few taps: one product there)
            assert any(label == "taps" for _, _, label in lowered.offered), lowered.offered


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_random_group_products_match_evaluate(data):
    """Sums whose output channel ``f`` one side reads through ``f // F`` (or ``% F``), built
    with the micro-kernel wherever it matches, against ``ta.evaluate``: batch, group, row and
    column axes of random sizes, a padded window, 1 or 2 threads, either target."""
    d = data.draw
    groups, per, cg = d(st.integers(1, 4)), d(st.integers(2, 5)), d(st.integers(1, 4))
    nb, width, taps = d(st.integers(1, 3)), d(st.integers(1, 9)), d(st.integers(1, 4))
    pad = d(st.integers(0, 2))
    f_form = d(st.sampled_from(["f", "f % F", "F - 1 - f % F"]))
    X = ta.placeholder((nb, groups * cg, width + taps - 1), "float64", name="X")
    W = ta.placeholder((groups * per, cg, taps), "float64", name="W")
    c, r = ta.reduce_axis((0, cg), "c"), ta.reduce_axis((0, taps), "r")

    def body(b, f, x):
        fw = {"f": f, "f % F": f % per, "F - 1 - f % F": per - 1 - f % per}[f_form]
        at = x + r - pad
        read = X[b, (f // per) * cg + c, at] if pad == 0 else \
            ta.if_then_else((at >= 0) & (at < X.shape[2]), X[b, (f // per) * cg + c, at], 0.0)
        return ta.sum(read * W[fw, c, r], axis=[c, r])

    Y = ta.compute((nb, groups * per, width), body, name="Y")
    rng = np.random.default_rng(d(st.integers(0, 9)))
    x, w = rng.uniform(-1, 1, X.shape), rng.uniform(-1, 1, W.shape)
    opts = dict(microkernel=True, num_threads=d(st.sampled_from([1, 2])), target=d(st.sampled_from(TARGETS)),
                parallel_min_work=0)
    if groups > 1 and width > 1 and cg * taps > 1:  # (an axis of one point may be gone)
        assert "matrix product" in str(ta.lower([Y], [X, W], **opts))
    got = ta.build([Y], [X, W], **opts)(x, w)
    np.testing.assert_allclose(got, ta.evaluate([Y], {X: x, W: w})[0], rtol=1e-12, atol=1e-12)
