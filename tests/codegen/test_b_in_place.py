"""Side B of a matrix product read in place by the micro-kernel (no packing pass before it):
every row tile reading B's rows where they are, or the first row tile packing B's panels for
the others as it reads them, a block's narrower last panel packed beforehand.  Oracle: NumPy's
product in float64, on an AVX-512 and an AVX2 target (the host's own where it cannot run
AVX-512), over shapes that end every block and tile early."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm.contraction import match_contraction, register_tile
from tensorad.codegen.gemm.microkernel import keeps_b_panels, reads_b_in_place
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"]


def _product(m: int, n: int, kk: int, transposed: bool = False):
    A = ta.placeholder((m, kk), "float32", "A")
    B = ta.placeholder((n, kk) if transposed else (kk, n), "float32", "B")
    k = ta.reduce_axis((0, kk), "k")
    if transposed:
        C = ta.compute((m, n), lambda i, j: ta.sum(A[i, k] * B[j, k], k), name="C")
    else:
        C = ta.compute((m, n), lambda i, j: ta.sum(A[i, k] * B[k, j], k), name="C")
    return A, B, C


def _check(m: int, n: int, kk: int, target: str, rng, **opts) -> None:
    if not parse_target(target).runs_here(host_target()):
        target = "llvm"  # (a CPU without AVX-512: its own tiles, checked the same way)
    A, B, C = _product(m, n, kk)
    kern = ta.build([C], [A, B], target=target, microkernel=True, parallel_min_work=0, **opts)
    a = rng.standard_normal((m, kk)).astype(np.float32)
    b = rng.standard_normal((kk, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for threads in (1, 2):  # (two: column blocks on both threads, each packing its own panels)
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, b), want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


@pytest.mark.parametrize("target", TARGETS)
def test_random_shapes_match_numpy(target, rng):
    # rows 1..70: one row tile up to many (in place, or the first tile packing for the others);
    # columns 1..70: whole panels, a narrower last one, or only that
    for _ in range(12):
        m, n, kk = (int(x) for x in rng.integers(1, 71, 3))
        _check(m, n, kk, target, rng)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (8, 48, 5), (33, 49, 70), (70, 23, 1), (4, 70, 17)])
def test_short_blocks_match_numpy(target, shape, rng):
    # KC = 16 and MC = 16: several k blocks (the first stores, later ones add) and row blocks
    # (the later ones read the panels the first row tile packed)
    _check(*shape, target, rng, tile=(None, None, 16, 16))


@pytest.mark.parametrize("target", TARGETS)
def test_skinny_product_matches_numpy(target, rng):
    _check(32, 1000, 1000, target, rng)


def _strides(t) -> tuple[int, ...]:
    return tuple(int(np.prod(t.shape[d + 1:])) for d in range(len(t.shape)))


@pytest.mark.parametrize("target", TARGETS)
def test_plain_columns_are_read_in_place_transposed_ones_packed(target):
    tgt = parse_target(target)
    for transposed, want in ((False, 1000), (True, 0)):
        *_, C = _product(32, 1000, 1000, transposed)
        s = match_contraction(C.op, C.op.body, target=tgt)
        plan = gd.plan_side(s.b, s.batch, s.n, s.k, _strides, s.nr, tgt.lanes("float32"))
        assert reads_b_in_place(s, plan) == want


def _pinned(target: str, l2: int):
    return replace(parse_target(target), l1d=32 << 10, l2=l2, l3=32 << 20, line=64, page=4096)


# AVX-512 with 1 MiB of L2 (Intel), AVX2 with 512 KiB (AMD Zen 3), AVX-512 with 1 MiB (Zen 4)
PINNED = [("llvm -mcpu=skylake-avx512", 1 << 20), ("llvm -mcpu=haswell", 512 << 10),
          ("llvm -mcpu=znver4", 1 << 20)]


@pytest.mark.parametrize("target, l2", PINNED)
def test_a_second_row_tile_reads_the_panels_the_first_packs(target, l2):
    # a second row tile reads the first tile's packed panel (short k blocks: in L1), not B's rows again
    # (a page apart for 1024 columns, they share few cache sets); one row tile reads B's rows once
    tgt = _pinned(target, l2)
    mr = register_tile(tgt, "float32")[0]
    for m, n in ((mr + 1, 1024), (mr + 1, 1000), (mr, 1024)):
        *_, C = _product(m, n, 1024)
        s = match_contraction(C.op, C.op.body, target=tgt)
        plan = gd.plan_side(s.b, s.batch, s.n, s.k, _strides, s.nr, tgt.lanes("float32"))
        assert reads_b_in_place(s, plan) == n
        assert keeps_b_panels(s) is (m > mr), (target, m, n)


@pytest.mark.parametrize("target", TARGETS)
def test_panels_packed_for_few_row_tiles_match_numpy(target, rng):
    # two and three row tiles (the last short) over rows a page apart, k in one block and in several
    tgt = parse_target(target) if parse_target(target).runs_here(host_target()) else host_target()
    for m, kk in ((19, 700), (13, 2100)):
        *_, C = _product(m, 1024, kk)
        s = match_contraction(C.op, C.op.body, target=tgt)
        plan = gd.plan_side(s.b, s.batch, s.n, s.k, _strides, s.nr, tgt.lanes("float32"))
        if -(-m // s.mr) > 1:  # (the path this test is for)
            assert reads_b_in_place(s, plan) and keeps_b_panels(s)
        _check(m, 1024, kk, target, rng)
