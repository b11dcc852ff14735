"""A factor of a matrix product's term that reads neither a row nor a column (a constant scale, a value
of ``k`` alone) is packed with the side that packs fewer values: attention's ``Q.grad = sum_s (G * s) K``
computes ``s * K`` (keys x head width) and copies ``G`` (queries x keys), rather than computing
``s * G``.  Values against NumPy in float64; the choice of side on pinned targets and caches."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.target import parse_target

import tensorad as ta

PINNED = {"avx2": lambda: replace(parse_target("llvm -mcpu=znver3"), l1d=32 << 10, l2=512 << 10, l3=32 << 20),
          "avx512": lambda: replace(parse_target("llvm -mcpu=skylake-avx512"), l1d=32 << 10, l2=1 << 20,
                                    l3=32 << 20)}
B, L, D = 2, 128, 64  # two heads of 128 queries and keys, 64 wide: the keys' side packs a quarter


def _computed(lowered) -> int:
    return sum(int(n) for n in re.findall(r"its packing computes (\d+) values", str(lowered)))


def _scaled_product(scale_of=None):
    """``C[b, l, d] = sum_s (G[b, l, s] * f(b, s)) * K[b, s, d]`` with ``f`` a constant or a value of
    ``(b, s)``."""
    G = ta.placeholder((B, L, L), "float64", "G")
    K = ta.placeholder((B, L, D), "float64", "K")
    F = ta.placeholder((B, L), "float64", "F")
    s = ta.reduce_axis((0, L), "s")
    scale = scale_of or (lambda b, s_: F[b, s_])
    C = ta.compute((B, L, D), lambda b, l_, d: ta.sum((G[b, l_, s] * scale(b, s)) * K[b, s, d], axis=s),
                   name="C")
    return C, G, K, F


@pytest.mark.parametrize("isa", sorted(PINNED))
@pytest.mark.parametrize("kind", ["constant", "value of k"])
def test_a_shared_factor_is_packed_with_the_smaller_side(isa, kind):
    scale = (lambda b, s_: ta.const(0.3, "float64")) if kind == "constant" else None
    C, G, K, F = _scaled_product(scale)
    inputs = [G, K] if kind == "constant" else [G, K, F]
    lowered = ta.lower([C], inputs, target=PINNED[isa]())
    assert "matrix product" in str(lowered)
    assert _computed(lowered) == B * L * D  # the keys' side (s x d), not the rows' (l x s)


def test_the_scaled_product_matches_numpy():
    C, G, K, F = _scaled_product()
    rng = np.random.default_rng(0)
    g, k, f = (rng.standard_normal(t.shape) for t in (G, K, F))
    got = ta.build([C], [G, K, F])(g, k, f)
    np.testing.assert_allclose(got, np.einsum("bls,bs,bsd->bld", g, f, k), rtol=1e-12, atol=1e-12)


def test_attention_gradients_pack_their_scale_with_the_keys_and_match_numpy():
    Q, K, V = (ta.placeholder((B, L, D), "float64", n) for n in "QKV")
    Y = ta.topi.nn.scaled_dot_product_attention(Q, K, V)
    H = ta.placeholder(Y.shape, "float64", "H")
    grads = ta.gradient(Y, [Q, K, V], H)
    rng = np.random.default_rng(1)
    q, k, v, h = (rng.standard_normal(t.shape) for t in (Q, K, V, H))
    dq, dk, dv = ta.build(list(grads), [Q, K, V, H])(q, k, v, h)
    scale = 1 / np.sqrt(D)
    s = np.einsum("bld,bsd->bls", q, k) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = np.einsum("bld,bsd->bls", h, v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    for got, want in ((dq, np.einsum("bls,bsd->bld", ds, k) * scale),
                      (dk, np.einsum("bls,bld->bsd", ds, q) * scale), (dv, np.einsum("bls,bld->bsd", p, h))):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
