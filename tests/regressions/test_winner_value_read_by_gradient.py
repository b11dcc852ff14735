"""A max/min that the gradient reads takes its value from the winner reduction.

Min-max normalization ``(X - min X) / (max X - min X)`` reads the minimum and the maximum in its
derivative, and routes heads to their winners.  The gradient computed each extreme twice: once plainly,
for the derivative's reads, and again as the winner reduction (value, first winner, tie count) that
routes the head, a 1.33x the work of a hand-written backward.  The winner reduction compares the
extreme's own source, so its value has the same bits: the gradient reads that value, one pass per
extreme.

Work is counted on a pinned target against the hand count written in the test; values are PyTorch's
float64 ``amin``/``amax`` (which split a tie's head evenly, as tensorad does), on integer-valued data so
that the extremes tie, and a Hessian-vector product through the gradient.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from blocks import assert_gradient_is_torchs, assert_hvp_is_torchs

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import gradient_cost  # noqa: E402

N = 200


def _normalized(dtype: str = "float32"):
    X = ta.placeholder((N,), dtype, name="X")
    a, b = ta.reduce_axis((0, N), "a"), ta.reduce_axis((0, N), "b")
    lo = ta.compute((1,), lambda _: ta.min(X[a], a), "lo")
    hi = ta.compute((1,), lambda _: ta.max(X[b], b), "hi")
    return X, ta.compute((N,), lambda i: (X[i] - lo[0]) / (hi[0] - lo[0]), "normalized")


def _torch(x):
    return (x - x.amin()) / (x.amax() - x.amin())


def test_each_extreme_is_one_pass():
    """Per element: the min and the max with their ties (one pass each), the two sums of the head the
    extremes' adjoints read, the tied extremes' routing (counted as if taken) and the gradient itself;
    plus each extreme's destination (one each)."""
    X, Y = _normalized()
    hand = 6 * N
    assert gradient_cost(Y, [X]).backward == hand + 2


def test_values_are_torchs():
    X, Y = _normalized("float64")
    H = ta.placeholder(Y.shape, "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(0)
    h = rng.standard_normal(N)
    draws = [("ties", rng.integers(0, 5, N).astype(np.float64), h),
             ("distinct", rng.standard_normal(N), h)]
    assert_gradient_is_torchs(dX, X, H, lambda x, h: (_torch(x) * h).sum(), draws)


def test_second_order_is_torchs():
    import torch

    X, Y = _normalized("float64")
    H = ta.placeholder(Y.shape, "float64", name="H")
    rng = np.random.default_rng(1)
    x, v, h = rng.standard_normal(N), rng.standard_normal(N), rng.standard_normal(N)
    assert_hvp_is_torchs(Y, X, H, lambda xt: (_torch(xt) ** 2 * torch.tensor(h)).sum(), x, v, h)


def test_a_row_maximum_read_by_the_next_op_is_one_pass():
    """``Z = A * max_k A[b, k]^2``: the maximum and its winner in one pass per row; values are PyTorch's
    ``amax`` (its ties share the head) on integer-valued rows."""
    B, K = 6, 10
    A = ta.placeholder((B, K), "float64", name="A")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((B,), lambda b: ta.max(A[b, k], k), "rowmax")
    Z = ta.compute((B, K), lambda b, j: A[b, j] * Y[b] * Y[b], "scaled")
    # per element: the winner with its ties, the sum of the head the maximum's adjoint reads, the tied
    # rows' routing (as if taken) and the gradient; plus each row's destination
    assert gradient_cost(Z, [A]).backward == 4 * B * K + B
    H = ta.placeholder(Z.shape, "float64", name="H")
    (dA,) = ta.JacobianRecursive(Z, [A], H)
    rng = np.random.default_rng(2)
    h = rng.standard_normal((B, K))
    draws = [("ties", rng.integers(0, 3, (B, K)).astype(np.float64), h),
             ("distinct", rng.standard_normal((B, K)), h)]
    assert_gradient_is_torchs(dA, A, H, lambda a, h: (a * a.amax(dim=1, keepdim=True) ** 2 * h).sum(), draws)
