"""Tap accumulators and stencils (codegen/strategies/stencil.py, codegen/loops/box_pieces.py): a depthwise
convolution's weight gradient as one stream with an accumulator per tap, its input gradient as
one elementwise op with its guards decided per piece.  Oracles: PyTorch float64 autograd and a
NumPy box blur written here; choices read from the lowering's offers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta
from tensorad import topi

F = torch.nn.functional
RNG = np.random.default_rng(7)


def _chosen(lowered) -> dict[str, str]:
    return {point.split("#")[0]: chosen for point, _, chosen in lowered.offered}


def _depthwise(shape, k, stride=1, pad=1, dilation=1, dtype="float64", **opts):
    n, c, h, w = shape
    X = ta.placeholder(shape, dtype, name="X")
    W = ta.placeholder((c, 1, k, k), dtype, name="W")
    Y = topi.nn.conv2d(X, W, stride, pad, dilation=dilation, groups=c)
    return X, W, Y, ta.function(Y, [X, W], wrt=[X, W], num_threads=1, **opts)


def _torch_grads(x, w, h, groups=None, **conv):
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = F.conv2d(tx, tw, groups=groups or x.shape[1], **conv)
    gx, gw = torch.autograd.grad(y, [tx, tw], torch.tensor(h))
    return y.detach().numpy(), gx.numpy(), gw.numpy()


@pytest.mark.parametrize("k, stride, pad, dilation", [(3, 1, 1, 1), (3, 1, 2, 2), (3, 2, 1, 1), (2, 1, 0, 1)])
def test_depthwise_gradients_match_torch(k, stride, pad, dilation):
    shape = (2, 3, 9, 11)
    x, w = RNG.uniform(-1, 1, shape), RNG.uniform(-1, 1, (3, 1, k, k))
    X, W, Y, fn = _depthwise(shape, k, stride, pad, dilation)
    h = RNG.uniform(-1, 1, Y.shape)
    y, gx, gw = _torch_grads(x, w, h, stride=stride, padding=pad, dilation=dilation)
    got, res = fn.forward(x, w)
    np.testing.assert_allclose(got, y, rtol=1e-12, atol=1e-12)
    dx, dw = fn.backward(res, h)
    np.testing.assert_allclose(dx, gx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, gw, rtol=1e-12, atol=1e-12)


def test_depthwise_backward_takes_taps_and_stencil_and_checked_agrees():
    shape = (2, 4, 12, 13)
    x, w = RNG.uniform(-1, 1, shape), RNG.uniform(-1, 1, (4, 1, 3, 3))
    X, W, Y, fn = _depthwise(shape, 3)
    chosen = _chosen(fn.lower_backward())
    assert chosen["W.grad"] == "taps" and chosen["X.grad"] == "stencil"
    h = RNG.uniform(-1, 1, Y.shape)
    _, gx, gw = _torch_grads(x, w, h, padding=1)
    _, res = fn.forward(x, w)
    dx, dw = fn.backward(res, h)
    *_, checked = _depthwise(shape, 3, checked=True)
    _, res = checked.forward(x, w)
    cx, cw = checked.backward(res, h)
    for a, b in ((dx, gx), (dw, gw), (cx, gx), (cw, gw)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_stencil_interior_is_one_unguarded_loop():
    """The input gradient's guards are decided per piece: 9 pieces (interior, 4 edges, 4
    corners), none with a choice left; the interior reads its 9 taps unguarded."""
    *_, fn = _depthwise((2, 4, 12, 13), 3)
    text = fn.lower_backward().text
    nest = text.split("# nest X.grad")[1].split("# nest")[0]
    assert "9 pieces of decided guards" in nest
    assert "if_then_else" not in nest and "select" not in nest
    assert max(line.count("conv2d.head[") for line in nest.splitlines()) == 9


def test_fast_math_off_keeps_the_plain_loops():
    *_, fn = _depthwise((2, 4, 12, 13), 3, fastmath=False)
    assert not {"taps", "stencil"} & set(_chosen(fn.lower_backward()).values())


def test_more_taps_than_registers_are_not_held():
    """5 x 5 = 25 taps: more than AVX2's 16 registers hold, fewer than AVX-512's 32.  Tap
    accumulators must stay in registers; an unrolled stencil's weights past them are loads,
    which its cost counts (so it is offered on both)."""
    for target, held in (("llvm -mcpu=haswell", False), ("llvm -mcpu=skylake-avx512", True)):
        *_, fn = _depthwise((1, 2, 14, 15), 5, pad=2, target=target)
        offered = {label for _, labels, _ in fn.lower_backward().offered for label in labels}
        assert ("taps" in offered) is held and "stencil" in offered


@pytest.mark.parametrize("groups, target, unrolled", [(4, "llvm -mcpu=haswell", True),
                                                      (8, "llvm -mcpu=skylake-avx512", True),
                                                      (2, "llvm -mcpu=haswell", False)])
def test_grouped_convolution_unrolls_its_group_channels_with_the_window(groups, target, unrolled):
    """A grouped convolution's forward sums a few channels of its group as well as the window:
    the channels only index (no shift), the window slides, and the sum unrolls into one term per
    (channel, tap) -- 2 x 9 or 4 x 9 terms, weights past the registers loaded; 8 x 9 is past
    :data:`~tensorad.codegen.strategies.stencil.MAX_UNROLLED_TAPS` -- its guards decided per piece or its
    input read from a zero-padded copy; values
    and gradients against PyTorch's float64 autograd."""
    n, c, h, w = 2, 16, 9, 11
    X = ta.placeholder((n, c, h, w), "float64", name="X")
    W = ta.placeholder((c, c // groups, 3, 3), "float64", name="W")
    Y = topi.nn.conv2d(X, W, 1, 1, groups=groups)
    lowered = ta.lower([Y], [X, W], num_threads=1, target=target)
    assert (_chosen(lowered)[Y.name] == "stencil") is unrolled
    text = str(lowered)  # (guards decided per piece, or none: a zero-padded copy read)
    assert ("pieces of decided guards" in text or "X.padded" in text) is unrolled
    if not parse_target(target).runs_here(host_target()):
        target = "llvm"  # (the values are checked with the code this CPU runs)
    fn = ta.function(Y, [X, W], wrt=[X, W], num_threads=1, target=target)
    x, wv = RNG.uniform(-1, 1, (n, c, h, w)), RNG.uniform(-1, 1, (c, c // groups, 3, 3))
    got, res = fn.forward(x, wv)
    hv = RNG.uniform(-1, 1, got.shape)
    gx, gw = fn.backward(res, hv)
    want, tx, tw = _torch_grads(x, wv, hv, groups=groups, padding=1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gx, tx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, tw, rtol=1e-10, atol=1e-12)


def test_dense_convolution_weight_gradient_stays_a_product():
    X = ta.placeholder((4, 32, 14, 14), "float32", name="X")
    W = ta.placeholder((32, 32, 3, 3), "float32", name="W")
    Y = topi.nn.conv2d(X, W, 1, 1)
    fn = ta.function(Y, [X, W], wrt=[W], num_threads=1)
    chosen = _chosen(fn.lower_backward())
    assert chosen["W.grad"] in ("microkernel", "padded", "split-k")


def test_box_blur_and_its_gradient():
    """A 3 x 3 box blur without padding against NumPy: no weight per tap to hold in a register
    (LLVM reuses its loads across taps in half-width vectors), so it stays in strips."""
    n, h, w = 2, 10, 12
    X = ta.placeholder((n, h, w), "float64", name="X")
    ry, rx = ta.reduce_axis((0, 3), "ry"), ta.reduce_axis((0, 3), "rx")
    B = ta.compute((n, h - 2, w - 2), lambda b, y, x: ta.sum(X[b, y + ry, x + rx] / 9.0, axis=[ry, rx]),
                   name="blur")
    fn = ta.function(B, [X], wrt=[X], num_threads=1)
    assert _chosen(ta.lower([B], [X], num_threads=1))["blur"] == "strips"
    x = RNG.uniform(-1, 1, (n, h, w))
    want = sum(x[:, i:i + h - 2, j:j + w - 2] for i in range(3) for j in range(3)) / 9.0
    got, res = fn.forward(x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    head = RNG.uniform(-1, 1, want.shape)
    gx = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            gx[:, i:i + h - 2, j:j + w - 2] += head / 9.0
    (dx,) = fn.backward(res, head)
    np.testing.assert_allclose(dx, gx, rtol=1e-12, atol=1e-12)


def test_grouped_convolution_gradients_match_torch():
    """Two channels per group: the weight gradient's taps are ``(kh, kw)``, its outer axes the
    output and group channels (a channel index ``(f // 2) * 2 + c`` shifts no read)."""
    x, w = RNG.uniform(-1, 1, (2, 4, 9, 10)), RNG.uniform(-1, 1, (4, 2, 3, 3))
    X, W = ta.placeholder(x.shape, "float64", name="X"), ta.placeholder(w.shape, "float64", name="W")
    Y = topi.nn.conv2d(X, W, 1, 1, groups=2)
    fn = ta.function(Y, [X, W], wrt=[X, W], num_threads=1)
    assert _chosen(fn.lower_backward())["W.grad"] == "taps"
    h = RNG.uniform(-1, 1, Y.shape)
    _, gx, gw = _torch_grads(x, w, h, groups=2, padding=1)
    _, res = fn.forward(x, w)
    dx, dw = fn.backward(res, h)
    np.testing.assert_allclose(dx, gx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, gw, rtol=1e-12, atol=1e-12)


def test_guards_decided_per_piece_compute_the_same():
    """An elementwise op asking for it (``GUARD_ATTR``) is cut into the pieces its guards
    decide: ``[0]``, ``[1, 8]``, ``[9]``, none with a choice left; values against NumPy."""
    from tensorad.codegen.loops.box_pieces import GUARD_ATTR

    from tensorad.ir.tensor import ComputeOp, Tensor

    A = ta.placeholder((10,), "float64", name="A")
    i = ta.ir.var("i", 0, 10)
    body = (ta.if_then_else(i >= 1, A[i - 1], 0.0) + ta.if_then_else(i <= 8, A[i + 1], 0.0))
    T = Tensor(ComputeOp("T", "", (i,), (body,), ((GUARD_ATTR, True),)), 0)
    text = ta.lower([T], [A]).text
    assert "3 pieces of decided guards" in text and "if_then_else" not in text
    a = RNG.uniform(-1, 1, 10)
    want = np.concatenate([[0.0], a[:-1]]) + np.concatenate([a[1:], [0.0]])
    np.testing.assert_allclose(ta.build([T], [A])(a), want, rtol=1e-15)


def _causal_attention_numpy(q, k, v, heads):
    """Causal softmax(Q K^T / sqrt(d)) V per head, in float64, heads split from the last axis."""
    b, n, hd = q.shape
    d = hd // heads
    split = [x.astype(np.float64).reshape(b, n, heads, d).transpose(0, 2, 1, 3) for x in (q, k, v)]
    s = np.einsum("bhid,bhjd->bhij", split[0], split[1]) / np.sqrt(d)
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", w / w.sum(-1, keepdims=True), split[2])


@pytest.mark.parametrize("threads", [1, 2])
def test_heads_sharing_one_causal_mask_have_no_border(threads):
    """Heads read from one matrix are the taps of causal attention's scores; every head's points are the
    interior (one mask for all), so the split has no border: no border sum, no buffer of zeros filled
    for it and read back by every score."""
    b, n, heads, d = 2, 13, 3, 8
    Q, K, V = (ta.placeholder((b, n, heads * d), "float32", name) for name in "QKV")

    def split(t):
        return topi.transpose(topi.reshape(t, (b, n, heads, d)), (0, 2, 1, 3))
    A = topi.nn.scaled_dot_product_attention(split(Q), split(K), split(V), causal=True)
    opts = {"target": "llvm -mcpu=haswell", "num_threads": threads}
    lowered = ta.lower([A], [Q, K, V], **opts)
    assert _chosen(lowered)["attention.scores.red"] == "taps"
    assert not any("border" in line for line in str(lowered).splitlines())
    q, k, v = (RNG.uniform(-1, 1, (b, n, heads * d)).astype(np.float32) for _ in range(3))
    want = _causal_attention_numpy(q, k, v, heads)
    for checked in (False, True):
        got = ta.build([A], [Q, K, V], checked=checked, **opts)(q, k, v)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
