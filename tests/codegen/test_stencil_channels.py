"""A sum over many channels of a few unrolled taps (codegen/strategies/stencil.py ``unroll_taps`` with
channel axes; codegen/loops/domain.py and schedule.py: a reduction's guards decided per piece): a
strided convolution's input gradient with few input channels -- an RGB stem's -- adds every
tap of a channel to the output row at once.  Oracles: PyTorch float64 autograd, ``ta.evaluate``,
and the plain loops of the same program; choices read from the lowering's offers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.strategies.stencil import unroll_taps

import tensorad as ta
from tensorad import topi

F = torch.nn.functional


def _input_gradient(n, c, hw, f, k, stride, pad, dtype="float64"):
    X = ta.placeholder((n, c, hw, hw), dtype, name="X")
    W = ta.placeholder((f, c, k, k), dtype, name="W")
    Y = topi.nn.conv2d(X, W, stride, pad)
    H = ta.placeholder(Y.shape, dtype, name="H")
    (gx,) = ta.JacobianRecursive(Y, [X], H)
    return W, H, gx


def _stencil_everywhere(low) -> dict:
    """The choices that take the stencil wherever it is offered (the rest as chosen)."""
    return {p: ("stencil" if "stencil" in labels else chosen) for p, labels, chosen in low.offered}


def _torch_dx(x, w, h, stride, pad):
    tx = torch.tensor(x, requires_grad=True)
    y = F.conv2d(tx, torch.tensor(w), stride=stride, padding=pad)
    (gx,) = torch.autograd.grad(y, [tx], torch.tensor(h))
    return gx.numpy()


def test_a_stem_input_gradient_sums_channels_around_its_unrolled_taps():
    W, H, gx = _input_gradient(2, 3, 28, 16, 7, 2, 3)
    low = ta.lower([gx], [W, H], num_threads=1)
    classes = {p: c for p, _, c in low.offered if p.count("/") == 1}
    assert set(classes.values()) == {"stencil"}, low.offered
    assert "one pass for" not in low.text  # (each class a loop of its own: siblings' pieces apart)
    rng = np.random.default_rng(0)
    w, h = rng.uniform(-1, 1, (16, 3, 7, 7)), rng.uniform(-1, 1, (2, 16, 14, 14))
    x = np.zeros((2, 3, 28, 28))
    want = _torch_dx(x, w, h, 2, 3)
    for threads in (1, 2):
        k = ta.build([gx], [W, H], num_threads=threads)
        np.testing.assert_allclose(k(w, h), want, rtol=1e-11, atol=1e-11)
    checked = ta.build([gx], [W, H], num_threads=2, checked=True)
    np.testing.assert_allclose(checked(w, h), want, rtol=1e-11, atol=1e-11)


@settings(max_examples=12, deadline=None)
@given(c=st.integers(1, 4), f=st.integers(9, 20), k=st.integers(2, 5), stride=st.integers(1, 3),
       pad=st.integers(0, 2), hw=st.integers(6, 13), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_channels_around_taps_agree_with_evaluate(c, f, k, stride, pad, hw, dtype, threads, seed):
    if hw + 2 * pad < k:
        return
    W, H, gx = _input_gradient(1, c, hw, f, k, stride, pad, dtype)
    low = ta.lower([gx], [W, H], num_threads=threads, variants=True)
    choices = _stencil_everywhere(low)
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1, 1, W.shape).astype(dtype)
    h = rng.uniform(-1, 1, H.shape).astype(dtype)
    want = ta.evaluate(gx, {W: w, H: h})
    got = ta.build([gx], [W, H], num_threads=threads, variants=True, choices=choices)(w, h)
    tol = 1e-4 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _sum_of(cond):
    """``sum_{f, t} A[f, i + t] * B[f, t]`` under ``cond(f, t)``: 12 channels around 3 taps."""
    A = ta.placeholder((12, 20), "float64", name="A")
    B = ta.placeholder((12, 3), "float64", name="B")
    f = ta.reduce_axis((0, 12), name="f")
    t = ta.reduce_axis((0, 3), name="t")
    S = ta.compute((18,), lambda i: ta.sum(A[f, i + t] * B[f, t], axis=[f, t], where=cond(f, t)), name="S")
    return S


def test_a_condition_tying_a_channel_to_a_tap_is_refused():
    S = _sum_of(lambda f, t: f > t)
    assert unroll_taps(S.op, S.op.body[0], reread_limit=1 << 30) is None
    ok = _sum_of(lambda f, t: f > 2)  # (a condition on the channel alone stays with the sum)
    unrolled = unroll_taps(ok.op, ok.op.body[0], reread_limit=1 << 30)
    assert unrolled is not None and unrolled.is_reduction
    assert [a.extent for a in unrolled.body[0].arg.axes] == [12]


@pytest.mark.parametrize("limit, offered", [(None, False), (1000, False), (1920, True)])
def test_channels_stay_a_loop_only_within_the_reread_limit(limit, offered):
    # S[c, i] = sum_{f, t} A[f, i + t] B[c, f, t]: each output channel c reads all of A again
    # (12 x 20 doubles, 1920 bytes between two passes)
    A = ta.placeholder((12, 20), "float64", name="A")
    B = ta.placeholder((2, 12, 3), "float64", name="B")
    f = ta.reduce_axis((0, 12), name="f")
    t = ta.reduce_axis((0, 3), name="t")
    S = ta.compute((2, 18), lambda c, i: ta.sum(A[f, i + t] * B[c, f, t], axis=[f, t]), name="S")
    got = unroll_taps(S.op, S.op.body[0], reread_limit=limit)
    assert (got is not None) == offered
    if got is not None:
        rng = np.random.default_rng(1)
        a, b = rng.uniform(-1, 1, (12, 20)), rng.uniform(-1, 1, (2, 12, 3))
        want = np.einsum("fit,cft->ci", np.stack([a[:, t:t + 18] for t in range(3)], -1), b)
        low = ta.lower([S], [A, B], num_threads=1, variants=True)
        k = ta.build([S], [A, B], num_threads=1, variants=True, choices=_stencil_everywhere(low))
        np.testing.assert_allclose(k(a, b), want, rtol=1e-12, atol=1e-12)
