"""Edge row tiles of the matrix-product library: a row tile of fewer than ``MR`` rows runs the
shortest micro-kernel that covers them (``MR`` and its halvings), reading A's ``MR``-high panel;
and the row tiles ask for the next panel of B read in place on the way.  Oracle: NumPy's product
in float64, on an AVX-512 and an AVX2 target (the host's own where it cannot run AVX-512), for
every row count of a tile, B read in place or packed, one ``k`` block or several."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.gemm.contraction import register_tile
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"]


def _runnable(target: str) -> str:
    return target if parse_target(target).runs_here(host_target()) else "llvm"


def _check(m: int, n: int, kk: int, target: str, transposed: bool, rng, **opts) -> None:
    A = ta.placeholder((m, kk), "float32", "A")
    B = ta.placeholder((n, kk) if transposed else (kk, n), "float32", "B")
    k = ta.reduce_axis((0, kk), "k")
    if transposed:
        C = ta.compute((m, n), lambda i, j: ta.sum(A[i, k] * B[j, k], k), name="C")
    else:
        C = ta.compute((m, n), lambda i, j: ta.sum(A[i, k] * B[k, j], k), name="C")
    kern = ta.build([C], [A, B], target=_runnable(target), microkernel=True, parallel_min_work=0,
                    num_threads=1, **opts)
    a = rng.standard_normal((m, kk)).astype(np.float32)
    b = rng.standard_normal(B.shape).astype(np.float32)
    want = a.astype(np.float64) @ (b.T if transposed else b).astype(np.float64)
    np.testing.assert_allclose(kern(a, b), want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("transposed", [False, True])
def test_every_edge_row_count_matches_numpy(target, transposed, rng):
    # M = 2 MR + r for every r < MR: two whole row tiles and an edge tile of r rows; 53 columns
    # (a narrower last panel) and 37 k steps in three blocks of 16 (the next block's panel asked for)
    mr, _ = register_tile(parse_target(_runnable(target)), "float32")
    for rows in range(mr):
        _check(2 * mr + rows, 53, 37, target, transposed, rng, tile=(None, None, 16, None))


@pytest.mark.parametrize("target", TARGETS)
def test_skinny_products_with_odd_sides_match_numpy(target, rng):
    # few rows, one row tile to several (the first then packing B for the others), odd N and K
    for m, n, kk in ((3, 999, 301), (33, 101, 1001), (45, 130, 257)):
        _check(m, n, kk, target, False, rng)


@pytest.mark.parametrize("target", TARGETS)
def test_driver_calls_a_kernel_per_edge_height(target):
    """The core defines the packed and in-place micro-kernels at ``MR`` and each halving down to one row
    (only ``MR`` for the one that packs B's panels), and its driver calls each."""
    t = parse_target(target)
    mr, nr = register_tile(t, "float32")
    assert gemmlib.heights(mr) == [mr >> i for i in range(mr.bit_length())]
    text = gemmlib.piece_ir("float32", mr, nr, "core", t)
    defined = set(re.findall(r'define [^@]*@"?(\w+_micro\w*)"?\(', text))
    driver = text[text.index("_driver"):]
    called = set(re.findall(r'call [^@]*@"?(\w+_micro\w*)"?\(', driver))
    suffixes = {name.split("_micro", 1)[1] for name in defined}
    want = {kind + (f"_h{h}" if h < mr else "") for kind in ("", "_strided") for h in gemmlib.heights(mr)}
    assert suffixes == want | {"_strided_packing"}
    assert called == defined
