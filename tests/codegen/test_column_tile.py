"""The register tile's width chosen for the product's columns (codegen/gemm/contraction.column_tile):
an edge panel is computed whole, so 32 columns on AVX2's 24-wide tile multiply-added 48."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.gemm.contraction import column_tile
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"


def _tile(text: str) -> tuple[int, int]:
    mr, nr = re.search(r"packed (\d+)x(\d+) vector micro-kernel", text).groups()
    return int(mr), int(nr)


@pytest.mark.parametrize("n, nr", [(8, 8), (16, 16), (32, 16), (64, 16), (40, 24), (48, 24), (72, 24),
                                   (250, 24), (512, 24), (1024, 24)])
def test_avx2_columns(n, nr):
    assert column_tile(n, 8, 4, 24, 8) == nr


@pytest.mark.parametrize("n, nr", [(32, 32), (64, 32), (16, 16), (48, 48), (96, 48), (480, 48), (512, 32),
                                   (1024, 32)])
def test_avx512_columns(n, nr):
    # 8 rows: 8 accumulators even at one vector, so only the padded columns count
    assert column_tile(n, 8, 8, 48, 16) == nr


@pytest.mark.parametrize("target, want", [(AVX512, (8, 32)), (AVX2, (4, 24))])
def test_512_columns_take_the_tile_that_pads_none(target, want):
    """The bug: 512 columns ran 11 panels of 48 on AVX-512 (528 columns multiply-added, the last panel
    through a temporary tile), because a narrower tile had to save 10% of the model's slots; 16 panels
    of 32 take fewer slots and run 5-10% faster.  On AVX2 the 24-wide tile stays: a 16-wide one holds
    only 8 accumulators, the least that keeps the FMA units busy."""
    X = ta.placeholder((128, 784), name="X")
    W = ta.placeholder((512, 784), name="W")
    assert _tile(str(ta.lower([ta.topi.nn.dense(X, W)], [X, W], target=target))) == want


@pytest.mark.parametrize("n, nr", [(32, 16), (64, 24), (128, 24), (16, 16)])
def test_no_more_column_blocks(n, nr):
    # unbatched, the columns are cut into up to 4 blocks (for the threads), each packing A
    # again: 64 columns are 3 blocks of 24 but would be 4 of 16
    assert column_tile(n, 1, 4, 24, 8) == nr


def test_more_blocks_when_side_a_is_packed_once():
    # 256 columns: 48-wide panels compute 288 (three uneven blocks); 32-wide ones 256 in four
    # blocks, which cost nothing more when A is packed once per call
    assert column_tile(256, 1, 8, 48, 16) == 48
    assert column_tile(256, 1, 8, 48, 16, a_once=True) == 32
    X = ta.placeholder((512, 1024), name="X")
    W = ta.placeholder((1024, 256), name="W")
    k = ta.reduce_axis((0, 1024), "k")
    Y = ta.compute((512, 256), lambda i, j: ta.sum(X[i, k] * W[k, j], axis=k), name="Y")
    assert _tile(str(ta.lower([Y], [X, W], target=AVX512))) == (8, 32)


def _bilinear(n: int):
    A = ta.placeholder((12, 16), name="A")
    W = ta.placeholder((n, 16, 16), name="W")
    B = ta.placeholder((12, 16), name="B")
    i, j = ta.reduce_axis((0, 16), "i"), ta.reduce_axis((0, 16), "j")
    Y = ta.compute((12, n), lambda b, o: ta.sum(A[b, i] * W[o, i, j] * B[b, j], axis=[i, j]), name="Y")
    return [A, W, B], Y


@pytest.mark.parametrize("target, want", [(AVX2, (4, 16)), (AVX512, (8, 32)), ("llvm", None)])
def test_a_32_column_product_multiply_adds_only_its_columns(target, want):
    ins, Y = _bilinear(32)
    lowered = ta.lower([Y], ins, target=target, microkernel=True)
    mr, nr = _tile(str(lowered))
    if want is not None:
        assert (mr, nr) == want
    assert 32 % nr == 0  # no padded column: 12 x 32 x 256 multiply-adds in whole tiles, not 12 x 48 x 256
    if not parse_target(target).runs_here(host_target()):
        return  # AVX-512 code on an AVX2 machine: compiled above, not run
    rng = np.random.default_rng(0)
    a, w, b = (rng.standard_normal(t.shape).astype(np.float32) for t in ins)
    got = ta.build([Y], ins, target=target, microkernel=True)(a, w, b)
    want_y = np.einsum("bi,oij,bj->bo", a.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want_y, rtol=1e-4, atol=1e-4)


def test_an_explicit_tile_is_kept():
    ins, Y = _bilinear(32)
    assert _tile(str(ta.lower([Y], ins, target=AVX2, microkernel=True, tile=(4, 24)))) == (4, 24)


def test_k_blocks_grow_where_the_block_of_b_fits_half_of_l2():
    from dataclasses import replace

    from tensorad.codegen.gemm.contraction import cache_blocks

    xeon = replace(parse_target(AVX512), l1d=48 << 10, l2=2 << 20)
    epyc = replace(parse_target(AVX2), l1d=32 << 10, l2=512 << 10)
    assert cache_blocks(xeon, "float32", 8, 48) == (256, 512)  # (no product given: the L1 rule)
    assert cache_blocks(xeon, "float32", 8, 48, 1024, 288) == (512, 256)  # two blocks of 512
    assert cache_blocks(xeon, "float32", 8, 48, 576, 816)[0] == 288  # two equal blocks, not 512 + 64
    assert cache_blocks(xeon, "float32", 8, 32, 1024, 64)[0] == 1024  # one block
    assert cache_blocks(xeon, "float32", 8, 48, 200, 288)[0] == 256  # (k within one block already)
    assert cache_blocks(epyc, "float32", 4, 24, 1024, 264) == cache_blocks(epyc, "float32", 4, 24)


def test_k_blocks_stay_short_where_few_row_tiles_read_them():
    # up to LONG_KC_TILES row tiles stream B once: its panels stay KC_MIN rows long, in L1 between them
    from dataclasses import replace

    from tensorad.codegen.gemm.contraction import LONG_KC_TILES, cache_blocks

    xeon = replace(parse_target(AVX512), l1d=48 << 10, l2=2 << 20)
    zen4 = replace(parse_target(AVX512), l1d=32 << 10, l2=1 << 20)
    for cpu in (xeon, zen4):
        few, many, short = LONG_KC_TILES * 8, LONG_KC_TILES * 8 + 1, cache_blocks(cpu, "float32", 8, 32)
        assert cache_blocks(cpu, "float32", 8, 32, 4096, 256, few) == short
        assert cache_blocks(cpu, "float32", 8, 32, 4096, 256, many)[0] > short[0]
