"""Packing a K-major side A: the product's rows contiguous in memory, its ``k`` steps one row of the
source apart (``dW[m, n] = sum_k G[k, m] X[k, n]``: a weight gradient, a recurrent layer's weight
gradient over its stacked steps).

The library's ``COPY`` packer copies one piece of a source row into each panel; with the rows 4 KiB
apart (1024 float32 rows) every piece of a panel's ``k`` steps falls in one L1 set, so packing panel
by panel reloaded each line from L2 for the next panel.  Whole contiguous panels are packed a few
rows at a time across every panel, checked or not, so the next panel finds the lines in L1.  These
tests run that path and its neighbours (a partial last panel, fewer ``k`` steps than a block).
Oracle: NumPy in float64, on an AVX-512 and an AVX2 target (the host's where it cannot run one).
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.program import Nest
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

RNG = np.random.default_rng(11)
AVX512, AVX2 = "llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"


def _k_major_product(m: int, n: int, k: int):
    G = ta.placeholder((k, m), "float32", "G")
    X = ta.placeholder((k, n), "float32", "X")
    r = ta.reduce_axis((0, k), "r")
    return G, X, ta.compute((m, n), lambda i, j: ta.sum(G[r, i] * X[r, j], axis=r), name="dW")


def _side_a_mode(kern) -> int | None:
    """The library's plan of side A of the kernel's one product (``None``: its own packer)."""
    prog = kern.lowered.program
    (spec,) = [s.attrs.gemm for s in prog.steps if isinstance(s, Nest) and s.attrs.gemm is not None]
    plan = gd.plan_side(spec.a, spec.batch, spec.m, spec.k, lambda t: prog.buffers[t].strides, spec.mr,
                        gd.panel_lanes(spec.target.lanes(spec.dtype), spec.nr))
    return None if plan is None else plan.mode


@pytest.mark.parametrize("target, m, n, k", [(AVX512, 1024, 40, 37), (AVX512, 100, 24, 19),
                                              (AVX2, 1024, 8, 3)])
def test_k_major_side_a_matches_numpy(target, m, n, k):
    """Rows 4 KiB apart in whole panels with a last short block of ``k`` steps; 100 rows (a partial
    last panel, packed panel by panel: ``MR`` is 8); fewer ``k`` steps than a block."""
    if not parse_target(target).runs_here(host_target()):
        target = "llvm"
    G, X, dW = _k_major_product(m, n, k)
    kern = ta.build([dW], [G, X], target=target, microkernel=True, num_threads=1)
    assert _side_a_mode(kern) == gd.COPY
    g = RNG.uniform(-1, 1, (k, m)).astype(np.float32)
    x = RNG.uniform(-1, 1, (k, n)).astype(np.float32)
    want = g.T.astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(kern(g, x), want, rtol=1e-5, atol=1e-5)
    g2 = RNG.uniform(-1, 1, (k, m)).astype(np.float32)  # (a second call packs again)
    np.testing.assert_allclose(kern(g2, x), g2.T.astype(np.float64) @ x.astype(np.float64), rtol=1e-5,
                               atol=1e-5)
