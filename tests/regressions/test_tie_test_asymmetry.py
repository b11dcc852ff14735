"""A max/min gradient splits the head evenly among the points tied with the winner, and finds
them by comparing each point's source with the winner's value.  That comparison must see the
same bits on both sides, however either side was compiled (a folded constant
against an inline ``pow``, one ulp apart, counted 1 of 6 ties and gave H/6).

Here the forward (which saves the winner, ``ta.function``'s default policy) is built with fast
math, so ``x0 * x1 + z`` is one FMA, and the backward without it, so the backward's copy of
the source rounds twice: at ``x0 = x1 = 1 + 2^-27, z[k] = -1`` the two differ by 2^-54.  Every
point ties (``z`` holds one value four times); the gradient is the head's sum times the other
factor, and a quarter of the head's sum for each ``z[k]``.  A source that may round differently
(here two operations) is stored once (``Y.tie``) and read by both sides; a source of reads,
choices, casts and at most one arithmetic operation recomputes exactly and is not stored (work
unchanged).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.rewrite import tensor_graph
from tensorad.ir.tensor import Role

A = 1 + 2.0**-27


def _program(op):
    x = ta.placeholder((2,), "float64", name="x")
    z = ta.placeholder((4,), "float64", name="z")
    k = ta.reduce_axis((0, 4), name="k")
    Y = ta.compute((3,), lambda i: op(x[0] * x[1] + z[k], axis=[k]), name="Y")
    return x, z, Y


def _winner_only(t):  # a user policy that saves the winner and would recompute the rest
    return t.name.endswith(".winner")


@pytest.mark.parametrize("op", [ta.max, ta.min])
@pytest.mark.parametrize("policy", ["default", "save_all", "recompute_all", _winner_only])
def test_forward_and_backward_built_differently_count_every_tie(op, policy):
    x, z, Y = _program(op)
    xv, zv, h = np.array([A, A]), np.full(4, -1.0), np.array([1.0, 2.0, -0.5])
    fused = ta.function(Y, [x, z], policy=policy, fastmath=True)
    strict = ta.function(Y, [x, z], policy=policy, fastmath=False)
    _, residuals = fused.forward(xv, zv)  # on an FMA target its values differ from strict's
    gx, gz = strict.backward(residuals, h)
    np.testing.assert_allclose(gx, h.sum() * xv[::-1], rtol=1e-15)
    np.testing.assert_allclose(gz, np.full(4, h.sum() / 4), rtol=1e-15)


def test_a_source_that_rounds_is_stored_once_and_an_exact_one_is_not():
    x, z, Y = _program(ta.max)
    (g,) = ta.gradient(Y, [x])
    saved = [t for t in tensor_graph([g]) if not t.is_placeholder
             and t.op.provenance.role is Role.SAVED]
    assert [t.shape for t in saved] == [(4,)]  # (Y copies one max along i: stored per k once)
    X = ta.placeholder((3, 5), "float64", name="X")
    r = ta.reduce_axis((-1, 2), name="r")
    P = ta.compute((3, 5), lambda i, j: ta.max(ta.if_then_else((j + r >= 0) & (j + r < 5), X[i, j + r],
                                                               -np.inf), axis=[r]), name="P")
    H = ta.placeholder((3, 5), "float64", name="H")
    (gp,) = ta.gradient(P, [X], H)
    assert not [t for t in tensor_graph([gp]) if not t.is_placeholder  # (the destinations
                and t.op.provenance.role is Role.SAVED and not t.name.endswith(".dest")]  # are saved)
    xv = np.array([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0], [0.0, -1.0, 5.0, 5.0, 1.0]])
    want = np.zeros((3, 5))  # each window's head split evenly among its maxima (PyTorch's amax)
    for i in range(3):
        for j in range(5):
            win = [c for c in (j - 1, j, j + 1) if 0 <= c < 5]
            best = max(xv[i, c] for c in win)
            ties = [c for c in win if xv[i, c] == best]
            for c in ties:
                want[i, c] += 1.0 / len(ties)
    np.testing.assert_allclose(ta.build([gp], [X, H])(xv, np.ones((3, 5))), want, rtol=1e-15)
