"""A max/min's winner and its tie count in one pass over each window.

A max/min whose source recomputes exactly found its winners from the maximum and then a second pass
over every window, summing a code of the points equal to it (their count and the lone winner's
position).  Where nothing else in the program reads the maximum -- an erosion ``min_{k<3} X[i+k]``,
an unpadded or dilated max pool, their output -- the gradient paid for both passes: erosion's
gradient did 1.67x and a dilated pool's 1.56x the work of a hand-written one (one pass giving the
winner and its ties, then the routing of ``H / count``).  Now one reduction over ``(value, code)``
(``combiners.tie_code_reducer``) gives both.

Work is counted on a pinned target against the hand count written beside each program; values are
PyTorch's float64 ``amin``/``amax`` over the unfolded windows (which split a tied window's head
evenly, as tensorad does), on integer-valued data so that most windows tie.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from blocks import assert_gradient_is_torchs

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import gradient_cost  # noqa: E402

R = ta.reduce_axis
N, K = 40, 3


def _erosion():
    X = ta.placeholder((N + K - 1,), "float64", name="X")
    k = R((0, K), "k")
    Y = ta.compute((N,), lambda i: ta.min(X[i + k], k), "erode")
    return X, Y, lambda x: x.unfold(0, K, 1).amin(dim=1)


def _erosion2d():
    X = ta.placeholder((N + K - 1, N + K - 1), "float64", name="X")
    k, m = R((0, K), "k"), R((0, K), "m")
    Y = ta.compute((N, N), lambda i, j: ta.min(X[i + k, j + m], [k, m]), "erode")
    return X, Y, lambda x: x.unfold(0, K, 1).unfold(1, K, 1).amin(dim=(2, 3))


def _dilated_pool():  # window 3, dilation 2, stride 1
    S = 12
    X = ta.placeholder((2, S + 2 * (K - 1), S + 2 * (K - 1)), "float64", name="X")
    r, s = R((0, K), "r"), R((0, K), "s")
    Y = ta.compute((2, S, S), lambda n, i, j: ta.max(X[n, i + 2 * r, j + 2 * s], [r, s]), "pool")
    span = 2 * K - 1
    return X, Y, lambda x: x.unfold(1, span, 1)[..., ::2].unfold(2, span, 1)[..., ::2].amax(dim=(3, 4))


PROGRAMS = {"erosion": _erosion, "erosion2d": _erosion2d, "dilated_pool": _dilated_pool}


def _size(t) -> int:
    return int(np.prod(t.shape))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_winner_pass_counts_ties(name):
    """One pass of the window per output (value and tie code), the destination (1 per output), the
    scatter (1 per output, and the tied windows' routing over the window, counted as if taken)."""
    X, Y, _ = PROGRAMS[name]()
    window, outputs = (K if name == "erosion" else K * K), _size(Y)
    hand = 2 * window * outputs  # the winner with its ties, then the routing of H / count
    work = gradient_cost(Y, [X]).backward
    assert work == window * outputs + outputs + outputs + window * outputs
    assert work <= (1.34 if name == "erosion" else 1.12) * hand


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_are_torchs_amin_amax(name):
    X, Y, torch_forward = PROGRAMS[name]()
    H = ta.placeholder(Y.shape, "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(0)
    draws = [(case, x, rng.standard_normal(Y.shape)) for case, x in (
        ("ties", rng.integers(0, 3, X.shape).astype(np.float64)),
        ("distinct", rng.standard_normal(X.shape)),
        ("infinities", np.where(rng.random(X.shape) < 0.3, np.inf, -np.inf)))]
    assert_gradient_is_torchs(dX, X, H, lambda x, h: (torch_forward(x) * h).sum(), draws)


def test_a_maximum_read_elsewhere_keeps_its_value():
    """When another op reads the maximum (a later layer), the gradient computes it anyway: the tie code is
    a sum beside it, and no pass over the window computes the maximum twice."""
    X = ta.placeholder((N + K - 1,), "float64", name="X")
    k = R((0, K), "k")
    Y = ta.compute((N,), lambda i: ta.max(X[i + k], k), "dilate")
    Z = ta.compute((N,), lambda i: Y[i] * Y[i], "square")
    H = ta.placeholder(Z.shape, "float64", name="H")
    (dX,) = ta.JacobianRecursive(Z, [X], H)
    # the maximum, the code summed beside it, the scatter (1 per output) and its tied windows' routing
    assert gradient_cost(Z, [X]).backward == K * N + K * N + N + K * N
    x = np.random.default_rng(1).integers(0, 3, X.shape).astype(np.float64)
    assert_gradient_is_torchs(dX, X, H, lambda x, h: (x.unfold(0, K, 1).amax(dim=1) ** 2 * h).sum(),
                              [("ties", x, np.ones(Z.shape))])
