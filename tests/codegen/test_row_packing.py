"""Packing a side read contiguously along the panel rows (a transposed operand under a causal
triangle, as attention's key and value gradients read their scores): branch-free, blocked
along ``k`` and vector code (codegen/gemm/packing.py ``_pack_rows``, contraction ``_eager``)."""

import re

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.expr import Op

RNG = np.random.default_rng(19)


def _function(ir_text: str, suffix: str) -> str:
    """The text of the function whose name ends in ``suffix``."""
    m = re.search(r'define[^\n]*_' + suffix + r'"?\(.*?\n}\n', ir_text, re.S)
    assert m, suffix
    return m.group(0)


def _triangle(b, n, k, scale_by=None):
    """``C[b, m, j] = sum_{r >= m} S[b, r, m] * s * Q[b, r, j]``: side A is ``S`` transposed
    (contiguous along m) under the triangle ``r >= m``."""
    S = ta.placeholder((b, k, n), "float32", "S")
    Q = ta.placeholder((b, k, 40), "float32", "Q")
    r = ta.reduce_axis((0, k), "r")
    if scale_by is None:
        C = ta.compute((b, n, 40), lambda z, i, j: ta.sum(S[z, r, i] * 0.5 * Q[z, r, j], r, where=r >= i),
                       name="C")
    else:
        C = ta.compute((b, n, 40), lambda z, i, j: ta.sum(scale_by(S[z, r, i]) * Q[z, r, j], r, where=r >= i),
                       name="C")
    return S, Q, C


# (an 8-wide NR is AVX2's: an AVX-512 host's vectors are 16 floats wide)
@pytest.mark.parametrize("tile,target", [(None, "llvm"), ((4, 8, 16, 12), "llvm -mcpu=haswell"),
                                         ((8, 16, 32, 24), "llvm")])
def test_triangular_transposed_side_packs_without_branches(tile, target):
    # 2 batches, 67 rows (partial panels), 83 values of k (not a multiple of the 16-row blocks)
    S, Q, C = _triangle(2, 67, 83)
    s = RNG.standard_normal((2, 83, 67)).astype(np.float32)
    q = RNG.standard_normal((2, 83, 40)).astype(np.float32)
    tri = np.tril(np.ones((83, 67)))  # r >= m
    want = np.einsum("zrm,zrj->zmj", s.astype(np.float64) * tri * 0.5, q.astype(np.float64))
    opts = {"tile": tile} if tile else {}
    for checked in (False, True):
        kern = ta.build([C], [S, Q], microkernel=True, parallel_min_work=0, checked=checked, target=target,
                        **opts)
        for threads in (1, 2):
            kern.num_threads = threads
            np.testing.assert_allclose(kern(s, q), want, rtol=1e-4, atol=1e-4)
    assert "matrix product" in str(ta.lower([C], [S, Q], microkernel=True, target=target, **opts))
    lowered = ta.lower([C], [S, Q], microkernel=True, target="llvm -mcpu=haswell", **opts)
    packed_side = {point: "microkernel" for point, _, _ in lowered.offered}  # (packed, not copied first)
    kern = ta.build([C], [S, Q], microkernel=True, target="llvm -mcpu=haswell", choices=packed_side, **opts)
    raw = _function(kern.compiled.llvm_ir_unoptimized, "packA")
    assert "ite.then" not in raw  # the triangle is a select, not a branch per element
    assert "pkb.body" in raw  # k in blocks, panel by panel
    packed = _function(kern.llvm_ir, "packA")
    assert re.search(r"store <\d+ x float>", packed)  # the full panels are vector code


def test_index_guard_is_eager_only_over_an_in_bounds_cheap_side():
    from tensorad.codegen.gemm.contraction import match_contraction

    _, _, C = _triangle(1, 64, 64)
    assert match_contraction(C.op, C.op.body).a.op is Op.SELECT
    _, _, E = _triangle(1, 64, 64, scale_by=ta.exp)  # a transcendental value stays behind its branch
    assert match_contraction(E.op, E.op.body).a.op is Op.IF_THEN_ELSE
    # an integer division may trap where the guard fails (a divisor of 0 there): it stays lazy (its
    # divisor reads side A's rows: a factor of neither rows nor columns would go to side B, unguarded)
    S, Q, D = ta.placeholder((1, 64, 64), "float32", "S"), ta.placeholder((1, 64, 40), "float32", "Q"), \
        ta.placeholder((1, 64, 64), "int32", "D")
    r = ta.reduce_axis((0, 64), "r")
    T = ta.compute((1, 64, 40), lambda z, i, j: ta.sum(S[z, r, i] * ta.cast("float32", 7 // D[z, r, i])
                                                        * Q[z, r, j], r, where=r >= i), name="T")
    assert match_contraction(T.op, T.op.body).a.op is Op.IF_THEN_ELSE
    # a padded window's guard is what keeps its read in bounds: it stays lazy
    X = ta.placeholder((2, 16, 30, 30), "float32", "X")
    W = ta.placeholder((32, 16, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    from tensorad.codegen.passes.buffers import inline_bodies

    body = inline_bodies(Y.op, set(), {X, W})
    spec = match_contraction(Y.op, body)
    assert Op.IF_THEN_ELSE in (spec.a.op, spec.b.op)
