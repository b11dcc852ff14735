"""A side of a matrix product that is an expression read contiguously along the sum packs through
register transposes: each block's rows are computed along the sum into a stack block first (the
attention gradient's ``dS * 0.125`` in ``dQ = dS K / 8``).

Oracles: NumPy float64 formulas written here; odd shapes (rows not a multiple of the panel, sums
not a multiple of the transpose block), the AVX-512 and AVX2 register tiles, both thread counts.
"""

import re

import numpy as np
import pytest
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

RNG = np.random.default_rng(5)
TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"]


def _here(target: str) -> str:
    """``target``, or the host where it cannot run ``target``'s code (its own tiles, checked the same way)."""
    return target if parse_target(target).runs_here(host_target()) else "llvm"


def _run(kern, arrays, want):
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(*arrays), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,n,k", [(64, 48, 80), (37, 29, 53)])
def test_scaled_and_exponentiated_a_side_packs_by_transposes(target, m, n, k):
    S = ta.placeholder((m, k), name="S")
    G = ta.placeholder((m, k), name="G")
    B = ta.placeholder((k, n), name="B")
    r = ta.reduce_axis((0, k), name="r")
    C = ta.compute((m, n), lambda i, j: ta.sum(S[i, r] * 0.125 * ta.exp(G[i, r]) * B[r, j], axis=r), name="C")
    kern = ta.build([C], [S, G, B], microkernel=True, parallel_min_work=0, target=_here(target))
    assert "staged" in kern.compiled.llvm_ir_unoptimized
    s, g, b = (RNG.standard_normal(t.shape).astype(np.float32) for t in (S, G, B))
    want = (s.astype(np.float64) * 0.125 * np.exp(g.astype(np.float64))) @ b
    _run(kern, (s, g, b), want)


@pytest.mark.parametrize("target", TARGETS)
def test_batched_b_side_over_a_row_factor_packs_by_transposes(target):
    # B[b, j, r] / D[b, j]: contiguous along the sum, a factor per panel row
    A = ta.placeholder((3, 41, 70), name="A")
    W = ta.placeholder((3, 50, 70), name="W")
    D = ta.placeholder((3, 50), name="D")
    r = ta.reduce_axis((0, 70), name="r")
    C = ta.compute((3, 41, 50), lambda q, i, j: ta.sum(A[q, i, r] * (W[q, j, r] / D[q, j]), axis=r), name="C")
    kern = ta.build([C], [A, W, D], microkernel=True, parallel_min_work=0, target=_here(target))
    assert "staged" in kern.compiled.llvm_ir_unoptimized
    a, w = (RNG.standard_normal(t.shape).astype(np.float32) for t in (A, W))
    d = RNG.uniform(1.0, 2.0, D.shape).astype(np.float32)
    want = np.einsum("qir,qjr->qij", a.astype(np.float64), w / d[:, :, None].astype(np.float64))
    _run(kern, (a, w, d), want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,n,k", [(64, 40, 150), (37, 19, 333)])
def test_a_computed_side_is_staged_by_one_loop_over_the_panel_rows(target, m, n, k):
    """The staging emitted the expression once per panel row (an unrolled loop per row: a register tile's
    height of copies for LLVM to optimize, most of a Transformer block's packing compile time).  The
    kernel's own code is one row function holding the expression once; the library's staging packer
    (``pack_routines.STAGED``) calls it per panel row and transposes, the remainder of the sum that no
    whole transpose block covers included.  Sums longer than one staged block
    (``pack_routines.STAGE_RUN``) and not a multiple of it."""
    A = ta.placeholder((m, k), name="A")
    S = ta.placeholder((m,), name="S")
    B = ta.placeholder((k, n), name="B")
    r = ta.reduce_axis((0, k), name="r")
    C = ta.compute((m, n), lambda i, j: ta.sum(ta.exp(A[i, r] - S[i]) / S[i] * B[r, j], axis=r), name="C")
    kern = ta.build([C], [A, S, B], microkernel=True, parallel_min_work=0, target=target, cache=False)
    text = kern.compiled.llvm_ir_unoptimized
    start = re.search(r'^define [^\n]*_packA_row"\(', text, re.M).start()
    row = text[start:text.index("\n}\n", start)]
    assert re.search(r'^declare [^\n]*_packA_staged"\(', text, re.M)
    assert row.count("fdiv") == 1, row.count("fdiv")
    if _here(target) == target:
        a, b = (RNG.standard_normal(t.shape).astype(np.float32) for t in (A, B))
        s = RNG.uniform(1.0, 2.0, S.shape).astype(np.float32)
        _run(kern, (a, s, b), (np.exp(a.astype(np.float64) - s[:, None]) / s[:, None]) @ b)


@pytest.mark.parametrize("target", TARGETS)
def test_the_staging_loop_is_one_loop_of_masked_vectors_on_avx512(target):
    """LLVM emitted the staged expression three times (a vector loop, a vector epilogue and a scalar
    remainder), each unrolled, for a loop of at most ``pack_routines.STAGE_RUN`` trips.  With cheap masked
    vector memory the remainder is folded into masked iterations: one vector copy; elsewhere it is
    vectorized as before, never unrolled."""
    A = ta.placeholder((64, 150), name="A")
    S = ta.placeholder((64,), name="S")
    B = ta.placeholder((150, 40), name="B")
    r = ta.reduce_axis((0, 150), name="r")
    C = ta.compute((64, 40), lambda i, j: ta.sum(ta.exp(A[i, r] - S[i]) * B[r, j], axis=r), name="C")
    kern = ta.build([C], [A, S, B], microkernel=True, parallel_min_work=0, target=target, cache=False)
    text = kern.llvm_ir
    start = re.search(r"^define [^\n]*_packA_row\(", text, re.M).start()
    packer = text[start:text.index("\n}\n", start)]
    assert "vector.memcheck" not in packer
    if "avx512" in target:
        assert "vec.epilog" not in packer and "llvm.masked.store" in packer
    a, b = (RNG.standard_normal(t.shape).astype(np.float32) for t in (A, B))
    s = RNG.uniform(1.0, 2.0, S.shape).astype(np.float32)
    if _here(target) == target:
        _run(kern, (a, s, b), np.exp(a.astype(np.float64) - s[:, None]) @ b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_computed_sides_of_two_products_share_the_librarys_staging_packer(dtype):
    """A computed side's transposes live in the library (one staging packer per dtype and register tile,
    compiled once): each kernel holds only its row function, no register transpose, and two products
    with other expressions and shapes on one tile call the same packer.  NumPy float64 formulas as
    oracles; odd shapes, a sum longer than one staged block."""
    rng = np.random.default_rng(3)
    A = ta.placeholder((37, 150), dtype, "A")
    S = ta.placeholder((150,), dtype, "S")
    B = ta.placeholder((150, 29), dtype, "B")
    r = ta.reduce_axis((0, 150), name="r")
    C1 = ta.compute((37, 29), lambda i, j: ta.sum(ta.maximum(A[i, r] + S[r], 0.0) * B[r, j], axis=r),
                    name="C1")
    G = ta.placeholder((21, 70), dtype, "G")
    D = ta.placeholder((70, 45), dtype, "D")
    q = ta.reduce_axis((0, 70), name="q")
    C2 = ta.compute((21, 45), lambda i, j: ta.sum(ta.exp(G[i, q] * 0.5) * D[q, j], axis=q), name="C2")
    a, s, b, g, d = (rng.standard_normal(t.shape).astype(dtype) for t in (A, S, B, G, D))
    symbols = []
    for C, ins, arrays, want in (
            (C1, [A, S, B], (a, s, b), np.maximum(a.astype(np.float64) + s, 0) @ b),
            (C2, [G, D], (g, d), np.exp(g.astype(np.float64) * 0.5) @ d)):
        kern = ta.build([C], ins, microkernel=True, parallel_min_work=0, tile=(8, 32, 16, 16))
        text = kern.compiled.llvm_ir_unoptimized
        assert "shufflevector" not in text and '_packA_row"' in text
        symbols.append(re.findall(r'^declare [^\n]*@"(tensorad_gemm_\w+_packA_staged)"', text, re.M))
        tol = 1e-4 if dtype == "float32" else 1e-10
        _run(kern, arrays, want) if dtype == "float32" else np.testing.assert_allclose(
            kern(*arrays), want, rtol=tol, atol=tol)
    assert symbols[0] == symbols[1] and len(symbols[0]) == 1, symbols
