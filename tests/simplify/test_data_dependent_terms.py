"""Sums whose terms differ only in data-dependent conditions run as one sum.

The derivative of a ``min`` or ``max`` has one term per outcome (left wins, right wins, a tie
shared); their nonzeroness differs only in comparisons of data, which no sum's domain can use.
Split into one sum per term, each term is a pass over the same domain; kept as one sum, the
gradient makes the one pass an expert writes.  A sum over a variable none of its terms uses is
that count times a sum without it.  Sums that scatter into overlapping slices of a tensor stay
scatters: one sum over the union of the slices would visit all of it at each term.

Work is counted on a pinned target against hand-written counts; values are checked against
NumPy formulas.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"


def test_a_window_clipped_at_a_row_value_has_one_pass_per_input(rng):
    """``Y[i] = sum_r min(A[i, r], |B[i]| + 1) A[i, r]``: ``dA`` is elementwise and ``dB`` one sum
    over each row, ``2 n p`` in all (a sum per outcome of the minimum makes six passes)."""
    n, p = 6, 9
    A, B = ta.placeholder((n, p), F64, "A"), ta.placeholder((n,), F64, "B")
    r = ta.reduce_axis((0, p), name="r")
    Y = ta.compute((n,), lambda i: ta.sum(ta.minimum(A[i, r], ta.abs(B[i]) + 1.0) * A[i, r], axis=r),
                   name="Y")
    H = ta.placeholder((n,), F64, "H")
    grads = list(ta.JacobianRecursive(Y, [A, B], H))
    assert ta.lower(grads, [A, B, H], target=TARGET).work == 2 * n * p

    a, b, h = 2.0 * rng.standard_normal((n, p)), rng.standard_normal(n), rng.standard_normal(n)
    c = (np.abs(b) + 1.0)[:, None]
    want_a = h[:, None] * (np.minimum(a, c) + a * (a < c))
    want_b = h * np.sign(b) * np.sum(a * (c < a), axis=1)
    got_a, got_b = ta.build(grads, [A, B, H])(a, b, h)
    np.testing.assert_allclose(got_a, want_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_b, want_b, rtol=1e-12, atol=1e-12)


def test_a_min_of_a_max_read_along_a_broadcast_axis_sums_the_head_once_per_input(rng):
    """``Y[i, j] = min(A[j], max(B[j], 2))``: each input's adjoint sums its column of the head
    once, ``m n`` each (a sum per outcome of the two choices makes twelve passes)."""
    m, n = 8, 5
    A, B = ta.placeholder((n,), F64, "A"), ta.placeholder((n,), F64, "B")
    Y = ta.compute((m, n), lambda i, j: ta.minimum(A[j], ta.maximum(B[j], 2.0)), name="Y")
    H = ta.placeholder((m, n), F64, "H")
    grads = list(ta.JacobianRecursive(Y, [A, B], H))
    assert ta.lower(grads, [A, B, H], target=TARGET).work == 2 * m * n

    a, b, h = 2.0 + rng.standard_normal(n), 2.0 + rng.standard_normal(n), rng.standard_normal((m, n))
    col = h.sum(axis=0)
    top = np.maximum(b, 2.0)
    got_a, got_b = ta.build(grads, [A, B, H])(a, b, h)
    np.testing.assert_allclose(got_a, col * (a < top), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_b, col * ((top < a) & (b > 2.0)), rtol=1e-12, atol=1e-12)


def test_a_variable_no_term_uses_is_a_count(rng):
    """``sum_{j, k} (exp X[i, j] + sin X[i, j])`` over ``k < p`` is ``p`` times the sum over ``j``:
    ``n m`` body runs, not ``n m p``."""
    n, m, p = 6, 7, 5
    X = ta.placeholder((n, m), F64, "X")
    j, k = ta.reduce_axis((0, m), name="j"), ta.reduce_axis((0, p), name="k")
    Y = ta.compute((n,), lambda i: ta.sum(ta.exp(X[i, j]) + ta.sin(X[i, j]), axis=[j, k]), name="Y")
    Z = ta.OptimizeAndLiftNonzeronessConditions(Y)
    assert ta.lower([Z], [X], target=TARGET).work == n * m

    x = rng.standard_normal((n, m))
    got = ta.build([Z], [X])(x)
    np.testing.assert_allclose(got, p * np.sum(np.exp(x) + np.sin(x), axis=1), rtol=1e-12)


def test_two_scatters_into_overlapping_slices_stay_scatters(rng):
    """``Y[i] = A[I[i], 0] A[0, J[i]]``: the adjoint scatters the head into column 0 and into row 0,
    sums whose domains overlap at ``A[0, 0]``; one sum over the union would visit every point of
    both slices for every ``i``.  Kept apart, each is a scatter of ``q`` adds, and the slices are
    filled once: ``2 q + n + m - 1``."""
    n, m, q = 9, 7, 8
    A = ta.placeholder((n, m), F64, "A")
    rows, cols = ta.placeholder((q,), "int32", "I"), ta.placeholder((q,), "int32", "J")
    Y = ta.compute((q,), lambda i: A[rows[i], 0] * A[0, cols[i]], name="Y")
    H = ta.placeholder((q,), F64, "H")
    (dA,) = ta.JacobianRecursive(Y, [A], H)
    assert ta.lower([dA], [A, rows, cols, H], target=TARGET).work == 2 * q + n + m - 1

    a, h = rng.standard_normal((n, m)), rng.standard_normal(q)
    ii, jj = rng.integers(0, n, q).astype(np.int32), rng.integers(0, m, q).astype(np.int32)
    want = np.zeros((n, m))
    np.add.at(want, (ii, 0), h * a[0, jj])
    np.add.at(want, (0, jj), h * a[ii, 0])
    np.testing.assert_allclose(ta.build([dA], [A, rows, cols, H])(a, ii, jj, h), want, rtol=1e-12, atol=1e-12)
