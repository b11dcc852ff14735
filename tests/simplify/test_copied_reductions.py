"""A product or a max whose value is copied along an output axis it never reads (a broadcast)
differentiates once per distinct value: the head is summed over the copied axis first, so the
zero count, the nonzero product, the winner and its routing run over the distinct outputs, not
over every copy.  Without that, the gradient of ``Y[c, i] = prod_k X[i, k]`` did each of those
passes ``C`` times (10x the forward's work here).

Oracles: NumPy formulas of the gradients written here; work counted by hand on a pinned target."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

C, R, K = 8, 6, 10  # copies, distinct rows, window


def _copied(reducer):
    X = ta.placeholder((R, K), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((C, R), lambda c, i: reducer(X[i, k], axis=[k]), name="Y")
    H = ta.placeholder((C, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return X, H, g


@pytest.mark.parametrize("name, hand", [
    # the zero count and the nonzero product (one pass each), the head summed over c, the routing
    ("prod", 2 * R * K + C * R + R * K),
    # the winner, the head summed over c, one scatter per distinct output
    ("max", R * K + C * R + R),
])
def test_a_copied_reduction_differentiates_once_per_distinct_value(name, hand):
    X, H, g = _copied(getattr(ta, name))
    work = ta.lower([g], [X, H], target=pinned()).work
    assert work <= 1.1 * hand, f"{name}: gradient work {work} > 1.1 x hand {hand}"


@pytest.mark.parametrize("name", ["prod", "max"])
def test_a_copied_reduction_gradient_matches_numpy(name):
    X, H, g = _copied(getattr(ta, name))
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (R, K))
    x[0, 3] = 0.0  # a row with one zero: only that factor has a nonzero derivative
    x[1, 2] = x[1, 7] = 0.0  # two zeros: no derivative at all
    h = rng.standard_normal((C, R))
    hs = h.sum(axis=0)[:, None]
    if name == "prod":
        others = np.array([[np.prod(np.delete(row, k)) for k in range(K)] for row in x])
        want = hs * others
    else:
        want = hs * (x == x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-12, atol=1e-12)
