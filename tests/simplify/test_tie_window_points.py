"""A max or min's ties are routed by a scatter over the points of its window; the reduction's own
condition bounds those points.  ``Y = max_{k : k % 3 == 0} X[k]`` ran its tie scatter over all ``K``
points of the box, the condition tested on an opaque copy of each point, instead of the ``K / 3``
points the condition keeps (3x the work where that scatter is the gradient's largest pass).

Oracles: a NumPy formula of the gradient written here (ties share the head evenly), float64
central differences; work counted by hand on a pinned target."""

from __future__ import annotations

import os
import sys

import numpy as np

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

K, STEP = 60, 3


def _strided_max():
    X = ta.placeholder((K,), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((), lambda: ta.max(X[k], axis=[k], where=k % STEP == 0), name="Y")
    H = ta.placeholder((), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return X, Y, H, g


def test_the_tie_scatter_visits_only_the_points_the_condition_keeps():
    X, Y, H, g = _strided_max()
    kept = K // STEP
    assert ta.lower([Y], [X], target=pinned()).work == kept
    # the winner pass, where the winner's head lands, the tie scatter over the kept points, and
    # the gradient written once per element of X
    hand = kept + 1 + kept + K
    work = ta.lower([g], [X, H], target=pinned()).work
    assert work <= hand, f"gradient work {work} > hand {hand}"


def test_the_tie_routing_matches_numpy_and_central_differences():
    X, Y, H, g = _strided_max()
    rng = np.random.default_rng(6)
    x = rng.standard_normal(K)
    x[6] = x[21] = 5.0  # a tie of two kept points
    x[7] = 9.0  # a larger value the condition drops
    want = np.zeros(K)
    want[[6, 21]] = 0.75 / 2
    kernel = ta.build([g], [X, H])
    np.testing.assert_allclose(kernel(x, np.array(0.75)), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: np.array(0.75)}), want, rtol=1e-12, atol=1e-12)
    x = rng.standard_normal(K)  # distinct values: central differences
    f, eps = ta.build([Y], [X]), 1e-6
    fd = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(K)])
    np.testing.assert_allclose(kernel(x, np.array(1.0)), fd, rtol=1e-6, atol=1e-8)
