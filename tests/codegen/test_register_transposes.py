"""The packers' register transposes, counted in the machine code LLVM makes of one block, and the
products that pack through them, against NumPy at odd sizes (edge tiles and short runs of ``k``).

A block's columns come from shuffles that stay within x86's 16-byte lanes while they can: unpack,
shufps, then vperm2f128 across the lanes.  On AVX2 an 8 x 8 float block takes 24 shuffles (the halving
order, whose last stage costs two instructions a vector, took 32) and a 4 x 4 block 8 (12); a panel of
4 rows, A's on AVX2, goes in blocks of 4 x 8 floats, whole vectors of its rows, 12 shuffles for the 32
elements that two 4 x 4 blocks moved in 24.  On AVX-512 the counts are those of the halving order.
"""

from __future__ import annotations

import re

import llvmlite.ir as ir
import numpy as np
import pytest
from tensorad.codegen.gemm.packing import transpose
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.target import parse_target

import tensorad as ta

SHUFFLES = re.compile(r"^\s*v(?:unpck|shuf|perm|insert|extract|blend|movlh|movhl|pshuf)\w*\s", re.M)
HASWELL, AVX512 = "llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"


def block_shuffles(spec: str, dtype: str, rows: int, depth: int) -> int:
    """The shuffles of a function that loads ``rows`` vectors of ``depth`` elements, transposes them
    and stores the result, compiled for ``spec``."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    m, vt, i64 = ir.Module(name="block"), ir.VectorType(t, depth), ir.IntType(64)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 2), "block")
    b = ir.IRBuilder(fn.append_basic_block())
    src, dst = fn.args
    loaded = [b.load(b.gep(src, [i64(r * depth)], source_etype=t), typ=vt) for r in range(rows)]
    for i, v in enumerate(transpose(b, loaded)):
        b.store(v, b.gep(dst, [i64(i * depth)], source_etype=t))
    b.ret_void()
    return len(SHUFFLES.findall(jit.assembly(str(m), parse_target(spec))))


@pytest.mark.parametrize("spec,dtype,rows,depth,shuffles", [
    (HASWELL, "float32", 8, 8, 24), (HASWELL, "float32", 4, 8, 12), (HASWELL, "float32", 4, 4, 8),
    (HASWELL, "float64", 4, 4, 8), (AVX512, "float32", 16, 16, 64), (AVX512, "float32", 8, 16, 32),
    (AVX512, "float64", 8, 8, 24)])
def test_a_block_takes_the_fewest_lane_wise_shuffles(spec, dtype, rows, depth, shuffles):
    assert block_shuffles(spec, dtype, rows, depth) == shuffles


LAYOUTS = {  # A, B and the reference of each layout; a stride-2 k packs the even lanes of two loads
    "a b^T": (lambda m, n, k: ((m, k), (n, k)), lambda A, B, i, j, r: A[i, r] * B[j, r],
              lambda a, b: a @ b.T),
    "a b": (lambda m, n, k: ((m, k), (k, n)), lambda A, B, i, j, r: A[i, r] * B[r, j], lambda a, b: a @ b),
    "a^T b^T": (lambda m, n, k: ((k, m), (n, k)), lambda A, B, i, j, r: A[r, i] * B[j, r],
                lambda a, b: a.T @ b.T),
    "stride 2": (lambda m, n, k: ((m, 2 * k), (n, 2 * k)), lambda A, B, i, j, r: A[i, 2 * r] * B[j, 2 * r],
                 lambda a, b: a[:, ::2] @ b[:, ::2].T),
}
SIZES = [(1, 1, 1), (3, 7, 17), (7, 33, 65), (17, 65, 3), (33, 3, 33), (65, 17, 7), (65, 65, 65), (4, 24, 8)]


@pytest.mark.parametrize("spec,dtype", [("llvm", "float32"), (HASWELL, "float32"), (HASWELL, "float64")])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_products_through_the_transposing_packers_match_numpy(spec, dtype, layout):
    shapes, body, reference = LAYOUTS[layout]
    rng = np.random.default_rng(46)
    tol = 1e-4 if dtype == "float32" else 1e-12
    for m, n, k in SIZES:
        sa, sb = shapes(m, n, k)
        A, B = ta.placeholder(sa, dtype, "A"), ta.placeholder(sb, dtype, "B")
        r = ta.reduce_axis((0, k), "r")
        C = ta.compute((m, n), lambda i, j, A=A, B=B, r=r: ta.sum(body(A, B, i, j, r), r), name="C")
        kernel = ta.build([C], [A, B], microkernel=True, parallel_min_work=0, target=spec)
        a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
        want = reference(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(kernel(a, b), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()),
                                   err_msg=f"{m}x{n}x{k}")
