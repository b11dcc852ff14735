"""A register tile of 6 or 14 rows packs side A with register transposes, not element by element.

The library's transposing packer (codegen/gemm/pack_routines.py) transposes blocks of rows whose count
divides the panel's height; only blocks of 4 or more rows were allowed, so a panel 6 or 14 rows high
(``tile=(6, 16)`` on AVX2, ``(6, 64)`` or ``(14, 32)`` on AVX-512) fell back to the gathering packer,
which reads each element through the offset tables.  A 6 x 16 AVX2 product then spent about 8% of its
time packing A and ran slower than 4 x 24, though its micro-kernel is as fast.  Panels of an even height
now transpose pairs of rows.  The oracle is NumPy's float64 product; the tile is pinned, the target is
AVX2 (every CPU the project runs on executes it).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

HASWELL = "llvm -mcpu=haswell"


@pytest.mark.parametrize("dtype,tile", [("float32", (6, 16)), ("float64", (6, 8)), ("float32", (14, 8))])
@pytest.mark.parametrize("threads", [1, 2])
def test_an_even_tile_height_packs_a_by_transposes_and_matches_numpy(dtype, tile, threads):
    m, n, k = 61, 70, 131  # (edge tiles in every direction; k not a multiple of any block)
    A = ta.placeholder((m, k), dtype, "A")
    B = ta.placeholder((k, n), dtype, "B")
    r = ta.reduce_axis((0, k), "r")
    C = ta.compute((m, n), lambda i, j: ta.sum(A[i, r] * B[r, j], r), "C")
    kern = ta.build([C], [A, B], target=HASWELL, tile=tile, num_threads=threads, microkernel=True)
    pieces = set(kern.compiled.library)
    assert any(p.endswith("packA_transpose") for p in pieces), pieces
    assert not any(p.endswith("_gather") for p in pieces), pieces
    rng = np.random.default_rng(threads)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (k, n)).astype(dtype)
    a[5, 7], a[13, 0], b[3, 69] = np.nan, np.inf, -np.inf  # (rows of a pair; inf times values: inf)
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    got = kern(a, b)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert np.isnan(got[5]).all() and np.isinf(got[:, 69]).sum() > 50  # (assert_allclose: where, too)
