"""Attention whose scores a user masks with ``if_then_else(j <= i, sum_d Q K * s, -inf)``, then a
hand-written softmax and the product with ``V``, runs over ``j <= i`` as ``ta.topi``'s causal spelling does.

``exp(masked - max)`` is zero where the mask is off, but nothing said so: the softmax's exponentials, its
row sums, its quotients and the product with ``V`` ran over every key, where the topi spelling, whose sums
carry the mask as ``where``, runs half of them.  A sum's terms read through materialized elementwise
tensors now narrow its domain (``exp`` of a ``-inf``-masked value is zero outside the mask), so both
spellings do the same work.  Oracles: PyTorch's float64 causal attention, and ``ta.evaluate``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from fuzz.cheap import pinned

TARGET = pinned("llvm -mcpu=skylake-avx512")
B, N, D = 2, 24, 8


def _spelled(Q, K, V):
    r = ta.reduce_axis((0, D), "d")
    off = ta.const(float("-inf"), "float64")
    scores = ta.compute((B, N, N), lambda h, i, j: ta.if_then_else(
        j <= i, ta.sum(Q[h, i, r] * K[h, j, r], axis=r) * (1.0 / D ** 0.5), off), name="scores")
    j = ta.reduce_axis((0, N), "j")
    m = ta.compute((B, N), lambda h, i: ta.max(scores[h, i, j], axis=j), name="m")
    e = ta.compute((B, N, N), lambda h, i, k: ta.exp(scores[h, i, k] - m[h, i]), name="e")
    j2 = ta.reduce_axis((0, N), "j2")
    z = ta.compute((B, N), lambda h, i: ta.sum(e[h, i, j2], axis=j2), name="z")
    P = ta.compute((B, N, N), lambda h, i, k: e[h, i, k] / z[h, i], name="P")
    t = ta.reduce_axis((0, N), "t")
    return ta.compute((B, N, D), lambda h, i, c: ta.sum(P[h, i, t] * V[h, t, c], axis=t), name="context")


def _inputs():
    return [ta.placeholder((B, N, D), "float64", n) for n in "QKV"]


def test_spelled_mask_does_the_topi_work_and_matches_torch():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    Q, K, V = _inputs()
    y = _spelled(Q, K, V)
    work = ta.lower([y], [Q, K, V], target=TARGET).work
    Qt, Kt, Vt = _inputs()
    topi = ta.topi.nn.scaled_dot_product_attention(Qt, Kt, Vt, causal=True)
    assert work == ta.lower([topi], [Qt, Kt, Vt], target=TARGET).work
    dense = ta.topi.nn.scaled_dot_product_attention(Qt, Kt, Vt)
    assert work < ta.lower([dense], [Qt, Kt, Vt], target=TARGET).work

    rng = np.random.default_rng(0)
    args = [rng.uniform(-2, 2, (B, N, D)) for _ in range(3)]
    got = ta.build([y], [Q, K, V])(*args)  # (the host: the pinned target counts work only)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in args), is_causal=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(y, dict(zip((Q, K, V), args))), want, rtol=1e-12, atol=1e-12)
