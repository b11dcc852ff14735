"""Products over a band: causal triangles and sliding windows run only the ``k`` they reach.

A product whose side A is zero outside a band of ``k`` around its row (``sum_{j <= i}
P[i, j] V[j, d]``: causal attention's output and its gradients) runs each micro-tile of rows
only over the ``k`` the rows reach (``contraction.Band``).  The work is counted in the
product's ``k`` steps (the micro-kernel's loop trips, what the note on the nest reports); the
values against NumPy float64.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.gemm.contraction import match_contraction

import tensorad as ta

B, L, D = 3, 53, 37
AVX2 = "llvm -mcpu=haswell"  # the target the shares below are of (runs on every machine here)
RNG = np.random.default_rng(11)
S_DATA = RNG.standard_normal((B, L, L)).astype(np.float32)
V_DATA = RNG.standard_normal((B, L, D)).astype(np.float32)
II, JJ = np.meshgrid(np.arange(L), np.arange(L), indexing="ij")

# (condition on (i, j), its NumPy mask, at most this share of the full product's k steps)
K_BANDS = {
    "causal": (lambda i, j: j <= i, JJ <= II, 56),
    "after": (lambda i, j: j >= i + 2, JJ >= II + 2, 50),
    "window": (lambda i, j: (j <= i + 3) & (j >= i - 5), (JJ <= II + 3) & (JJ >= II - 5), 25),
}


def _k_banded(cond):
    S = ta.placeholder((B, L, L), "float32", "S")
    V = ta.placeholder((B, L, D), "float32", "V")
    j = ta.reduce_axis((0, L), "j")
    out = ta.compute((B, L, D), lambda b, i, d: ta.sum(S[b, i, j] * V[b, j, d], axis=j, where=cond(i, j)),
                     name="out")
    return out, [S, V]


def _share(kern) -> int:
    """The share (%) of the full product's k steps that the nest's note reports."""
    found = re.search(r"k banded by rows: (\d+)% of the k steps", kern.lowered.text)
    assert found, kern.lowered.text
    return int(found.group(1))


@pytest.mark.parametrize("name", sorted(K_BANDS))
def test_k_band_runs_only_the_rows_reach(name):
    cond, mask, share = K_BANDS[name]
    out, ins = _k_banded(cond)
    want = np.einsum("bij,bjd->bid", S_DATA.astype(np.float64) * mask, V_DATA.astype(np.float64))
    # the shares are of AVX2's 4-row tiles (an AVX-512 host's 8-row tiles reach further); the
    # values on the host's own tiles too
    for threads, tile, target in ((1, None, AVX2), (2, None, AVX2), (1, (4, 8, 16, 8), AVX2),  # (KC = 16)
                                  (1, None, "llvm"), (2, None, "llvm")):
        kern = ta.build([out], ins, num_threads=threads, microkernel=True, target=target,
                        **({"tile": tile} if tile else {}))
        if target == AVX2:
            assert _share(kern) <= share
        np.testing.assert_allclose(kern(S_DATA, V_DATA), want, rtol=1e-4, atol=1e-4)


def test_k_band_over_two_reduction_axes():
    # the band on the first reduction axis of two: the flat k runs over whole rows of the second
    E = 4
    S = ta.placeholder((L, L, E), "float32", "S")
    V = ta.placeholder((L, E, D), "float32", "V")
    j, e = ta.reduce_axis((0, L), "j"), ta.reduce_axis((0, E), "e")
    out = ta.compute((L, D), lambda i, d: ta.sum(S[i, j, e] * V[j, e, d], axis=[j, e], where=j < i),
                     name="two")
    kern = ta.build([out], [S, V], num_threads=1, microkernel=True, target=AVX2)  # (4-row tiles)
    assert _share(kern) <= 56
    s = RNG.standard_normal((L, L, E)).astype(np.float32)
    v = RNG.standard_normal((L, E, D)).astype(np.float32)
    want = np.einsum("ije,jed->id", s.astype(np.float64) * (JJ < II)[:, :, None], v.astype(np.float64))
    np.testing.assert_allclose(kern(s, v), want, rtol=1e-4, atol=1e-4)


def test_k_band_skips_an_inf_only_excluded_terms_meet():
    out, ins = _k_banded(K_BANDS["causal"][0])
    v = V_DATA.copy()
    v[:, L - 1, :] = np.inf  # read by row L - 1 alone
    got = ta.build([out], ins, num_threads=1, microkernel=True)(S_DATA, v)
    want = np.einsum("bij,bjd->bid", S_DATA.astype(np.float64) * (JJ <= II), V_DATA.astype(np.float64))
    np.testing.assert_allclose(got[:, :L - 1], want[:, :L - 1], rtol=1e-4, atol=1e-4)


def test_band_is_read_from_unit_slopes_only():
    # j <= 2 i is no band of unit slope: the product keeps every k step
    S = ta.placeholder((L, 2 * L), "float32", "S")
    V = ta.placeholder((2 * L, D), "float32", "V")
    j = ta.reduce_axis((0, 2 * L), "j")
    out = ta.compute((L, D), lambda i, d: ta.sum(S[i, j] * V[j, d], axis=j, where=j <= 2 * i), name="o")
    spec = match_contraction(out.op, out.op.body)
    assert spec is not None and spec.band is None
