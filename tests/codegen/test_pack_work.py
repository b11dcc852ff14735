"""A matrix product's work counts what its packing computes: a side that is an expression (not a read of a
buffer) is evaluated once per element each time the library packs it.  Work is counted on a pinned
target and by hand; values are checked against NumPy float64 formulas."""

import numpy as np
import pytest
from tensorad.codegen.program import Nest

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"
RNG = np.random.default_rng(11)


def _check(Y, inputs, want, work):
    lowered = ta.lower([Y], inputs, target=TARGET)
    assert "matrix product" in str(lowered)
    assert lowered.work == work
    arrays = [RNG.standard_normal(t.shape) for t in inputs]
    np.testing.assert_allclose(ta.build([Y], inputs)(*arrays), want(*arrays), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("computed", [False, True])
def test_a_computed_side_is_packed_once_per_call(computed):
    """``sum_k (X[i, k] * S[i, k]) * W[j, k]``: side A, 64 x 96, fits the library's buffer packed once per
    call, so its product is computed 64 * 96 times besides the 64 * 80 * 96 multiply-adds."""
    m, n, kk = 64, 80, 96
    X, S = ta.placeholder((m, kk), F64, "X"), ta.placeholder((m, kk), F64, "S")
    W = ta.placeholder((n, kk), F64, "W")
    k = ta.reduce_axis((0, kk), "k")
    if computed:
        Y = ta.compute((m, n), lambda i, j: ta.sum(X[i, k] * S[i, k] * W[j, k], axis=k), name="Y")
        _check(Y, [X, S, W], lambda x, s, w: (x * s) @ w.T, m * n * kk + m * kk)
    else:
        Y = ta.compute((m, n), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="Y")
        _check(Y, [X, W], lambda x, w: x @ w.T, m * n * kk)


def test_a_computed_side_b_with_a_batch_axis_is_packed_once_per_batch_point():
    """``sum_k A[b, i, k] * (U[b, k, j] + V[b, k, j])``: side B reads the batch axis, each of its
    3 * 40 * 72 points packed once (for its batch point)."""
    nb, m, n, kk = 3, 64, 72, 40
    A = ta.placeholder((nb, m, kk), F64, "A")
    U, V = ta.placeholder((nb, kk, n), F64, "U"), ta.placeholder((nb, kk, n), F64, "V")
    k = ta.reduce_axis((0, kk), "k")
    Y = ta.compute((nb, m, n), lambda b, i, j: ta.sum(A[b, i, k] * (U[b, k, j] + V[b, k, j]), axis=k),
                   name="Y")
    _check(Y, [A, U, V], lambda a, u, v: a @ (u + v), nb * m * n * kk + nb * kk * n)


def test_a_shared_computed_side_b_too_large_to_keep_is_packed_per_batch_point():
    """``sum_k A[b, i, k] * (U[k, j] * V[k, j])``: side B reads no batch axis, but its 1024 x 1100 float64
    panels pass the 4 MiB the library packs once per call, and so does side A (528 x 1024): ``b`` stays a
    batch axis, and each batch point packs B again."""
    nb, m, n, kk = 2, 264, 1100, 1024
    A = ta.placeholder((nb, m, kk), F64, "A")
    U, V = ta.placeholder((kk, n), F64, "U"), ta.placeholder((kk, n), F64, "V")
    k = ta.reduce_axis((0, kk), "k")
    Y = ta.compute((nb, m, n), lambda b, i, j: ta.sum(A[b, i, k] * (U[k, j] * V[k, j]), axis=k), name="Y")
    _check(Y, [A, U, V], lambda a, u, v: a @ (u * v), nb * m * n * kk + nb * kk * n)


def test_a_shared_computed_side_b_of_merged_rows_is_packed_once():
    """The same product with side A small enough to pack once per call: its batch points are rows of
    one product, whose column blocks pack B once in all."""
    nb, m, n, kk = 2, 8, 1100, 1024
    A = ta.placeholder((nb, m, kk), F64, "A")
    U, V = ta.placeholder((kk, n), F64, "U"), ta.placeholder((kk, n), F64, "V")
    k = ta.reduce_axis((0, kk), "k")
    Y = ta.compute((nb, m, n), lambda b, i, j: ta.sum(A[b, i, k] * (U[k, j] * V[k, j]), axis=k), name="Y")
    _check(Y, [A, U, V], lambda a, u, v: a @ (u * v), nb * m * n * kk + kk * n)


def test_a_side_packed_per_column_block_is_computed_once_into_a_copy():
    """``sum_k exp(X[b, i, k]) * W[b, k, j]``: side A reads the batch axis, so the library packs it for each
    block of columns; 1024 columns take several blocks, so computing ``exp`` once per point into a copy
    (2 * 64 * 96 values) that the product reads costs less than the packing computing it per block."""
    nb, m, n, kk = 2, 64, 1024, 96
    X, W = ta.placeholder((nb, m, kk), F64, "X"), ta.placeholder((nb, kk, n), F64, "W")
    k = ta.reduce_axis((0, kk), "k")
    Y = ta.compute((nb, m, n), lambda b, i, j: ta.sum(ta.exp(X[b, i, k]) * W[b, k, j], axis=k), name="Y")
    _check(Y, [X, W], lambda x, w: np.exp(x) @ w, nb * m * n * kk + nb * m * kk)
    lowered = ta.lower([Y], [X, W], target=TARGET)
    product = next(s for s in lowered.program.steps if isinstance(s, Nest) and s.attrs.gemm is not None)
    side = product.attrs.gemm.a
    assert side.op is Op.READ and any(e.op is Op.EXP for e in walk(side.arg.op.body[0])), side
    packed = ta.lower([Y], [X, W], target=TARGET, choices={p: "microkernel" for p, _, _ in lowered.offered})
    assert packed.work > lowered.work
