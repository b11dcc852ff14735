"""Products with few, narrow column blocks split their rows into parts of the parallel loop
(codegen/gemm/contraction.row_parts), so that a second thread has work; and products narrower than a
vector run a micro-kernel of one narrower vector (contraction.column_tile).  The plans are read from the
lowered program on pinned targets and caches; the values are checked against NumPy in float64, and
the row parts are the same at any thread count, so 1 and 2 threads agree bitwise."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.gemm.contraction import NARROW_LANES, column_tile
from tensorad.codegen.target import parse_target

import tensorad as ta

XEON = replace(parse_target("llvm -mcpu=skylake-avx512"), l1d=48 << 10, l2=2 << 20)
EPYC = replace(parse_target("llvm -mcpu=haswell"), l1d=32 << 10, l2=512 << 10)


def _product(m: int, n: int, k: int, layout: str = "nn"):
    A = ta.placeholder((k, m) if layout == "tn" else (m, k), name="A")
    B = ta.placeholder((n, k) if layout == "nt" else (k, n), name="B")
    r = ta.reduce_axis((0, k), "r")
    C = ta.compute((m, n), lambda i, j: ta.sum((A[r, i] if layout == "tn" else A[i, r])
                                               * (B[j, r] if layout == "nt" else B[r, j]), r), "C")
    return A, B, C


def _note(outs, ins, target) -> str:
    lines = str(ta.lower(outs, ins, target=target)).splitlines()
    return next(line for line in lines if "matrix product" in line)


@pytest.mark.parametrize("target", [XEON, EPYC], ids=["avx512", "avx2"])
def test_narrow_columns_split_the_rows(target):
    A, B, C = _product(1000, 32, 1000)
    assert "NC=32 in 4 parts of rows" in _note([C], [A, B], target)  # (one column block: four blocks)
    A, B, C = _product(1000, 1000, 1000)
    assert "parts of rows" not in _note([C], [A, B], target)  # (column blocks enough)
    A, B, C = _product(40, 32, 4096)
    assert "parts of rows" not in _note([C], [A, B], target)  # (5 row tiles: too few to share)


@pytest.mark.parametrize("target", [XEON, EPYC], ids=["avx512", "avx2"])
def test_rows_four_times_the_columns_split_rows_rather_than_columns(target):
    # one column block in row parts packs A once where column blocks pack it once each
    A, B, C = _product(1024, 64, 1024)
    assert re.search(r"NC=64 in \d parts of rows", _note([C], [A, B], target))
    A, B, C = _product(4096, 256, 8)  # (a short sum: A is cheap to pack again)
    assert "parts of rows" not in _note([C], [A, B], target)
    A, B, C = _product(1024, 512, 1024)  # (rows only twice the columns)
    assert "parts of rows" not in _note([C], [A, B], target)


def test_a_computed_side_b_is_not_packed_again_per_part():
    A = ta.placeholder((1000, 1000), name="A")
    B = ta.placeholder((1000, 32), name="B")
    r = ta.reduce_axis((0, 1000), "r")
    C = ta.compute((1000, 32), lambda i, j: ta.sum(A[i, r] * ta.exp(B[r, j]), r), "C")
    assert "parts of rows" not in _note([C], [A, B], XEON)


@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_rows_in_parts_match_numpy_at_one_and_two_threads(rng, layout):
    m, n, k = 333, 40, 97
    A, B, C = _product(m, n, k, layout)
    bias = ta.placeholder((m,), name="bias")
    Y = ta.compute((m, n), lambda i, j: ta.tanh(C[i, j] + bias[i]), "Y")  # (applied per finished block)
    note = _note([Y], [A, B, bias], None)
    assert "parts of rows" in note and "Y applied" in note
    a = rng.standard_normal(A.shape, dtype=np.float32)
    b = rng.standard_normal(B.shape, dtype=np.float32)
    c = rng.standard_normal(m, dtype=np.float32)
    got = [ta.build([Y], [A, B, bias], num_threads=t)(a, b, c) for t in (1, 2)]
    aa = a.T if layout == "tn" else a
    bb = b.T if layout == "nt" else b
    want = np.tanh(aa.astype(np.float64) @ bb.astype(np.float64) + c[:, None])
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    assert np.array_equal(got[0], got[1])


def test_banded_rows_in_parts_repair_their_own_rows(rng):
    """A lower-triangular product in row parts: each part's row tiles run their own band of ``k``, and
    the NaN that a packed zero times B's ``inf`` makes is repaired in the part's rows (from the terms the
    condition keeps), so only the last row, which sums the ``inf``, is infinite."""
    m, n = 256, 32
    A = ta.placeholder((m, m), name="A")
    B = ta.placeholder((m, n), name="B")
    r = ta.reduce_axis((0, m), "r")
    C = ta.compute((m, n), lambda i, j: ta.sum(A[i, r] * B[r, j], r, where=r <= i), "C")
    assert "parts of rows" in _note([C], [A, B], None)
    a = rng.standard_normal((m, m), dtype=np.float32)
    b = rng.standard_normal((m, n), dtype=np.float32)
    b[-1] = np.inf
    got = [ta.build([C], [A, B], num_threads=t)(a, b) for t in (1, 2)]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.stack([a64[i, :i + 1] @ b64[:i + 1] for i in range(m)])
    assert np.isfinite(got[0][:-1]).all()
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    assert np.array_equal(got[0], got[1])


@pytest.mark.parametrize("n, nr", [(3, 4), (5, 8), (8, 8), (9, 16), (16, 16)])
def test_columns_fewer_than_lanes_take_one_narrower_vector(n, nr):
    assert column_tile(n, 1, 8, 48, 16) == nr  # (AVX-512)
    if n <= 8:
        assert column_tile(n, 1, 4, 24, 8) == max(nr, NARROW_LANES)  # (AVX2)


@pytest.mark.parametrize("target, tile", [(XEON, (8, 8)), (EPYC, (8, 8))], ids=["avx512", "avx2"])
def test_eight_columns_run_the_micro_kernel(rng, target, tile):
    A, B, C = _product(300, 8, 500)
    found = re.search(r"packed (\d+)x(\d+) vector micro-kernel", _note([C], [A, B], target))
    assert found and tuple(map(int, found.groups())) == tile


@pytest.mark.parametrize("n", [5, 8, 12])
def test_narrow_vectors_match_numpy(rng, n):
    A, B, C = _product(129, n, 300, "nt")
    a = rng.standard_normal(A.shape, dtype=np.float32)
    b = rng.standard_normal(B.shape, dtype=np.float32)
    got = ta.build([C], [A, B], microkernel=True)(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-4, atol=1e-4)
